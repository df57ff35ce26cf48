#include "engine/step_budget.h"

#include <algorithm>
#include <limits>

namespace peregrine {

StepBudget::StepBudget(int64_t max_batched_tokens, int64_t max_seqs, StepBudgetConfig config)
    : max_batched_tokens_(max_batched_tokens), max_seqs_(max_seqs), config_(config) {}

double StepBudget::budget_ms(const StepShape& decodes) const {
  if (config_.max_step_ms > 0) return config_.max_step_ms;
  if (config_.max_step_ms != kAutoStepBudget || !cost_.ready()) return 0;
  return kAutoStepFactor * cost_.predict_ms(decodes);
}

int64_t StepBudget::tokens(std::span<Sequence* const> running) const {
  constexpr int64_t kWarmupChunks = 4;
  const int64_t fixed = max_batched_tokens_;
  if (config_.max_step_ms == 0) return fixed;
  StepShape decodes;
  // Where the prompt chunk will start: the first prompt in line (Scheduler::schedule runs them in
  // this order); a new one (admitted after them) starts at 0.
  int64_t chunk_start = -1;
  for (const Sequence* s : running) {
    if (s->phase == SeqPhase::Decode) decodes.add(false, s->n_computed, s->n_to_schedule());
    if (s->phase == SeqPhase::Prefill && !s->in_flight && chunk_start < 0) chunk_start = s->n_computed;
  }
  if (decodes.decode_rows == 0) return fixed;
  if (!cost_.ready()) return std::min(fixed, decodes.decode_rows + kWarmupChunks * config_.min_prefill_chunk);
  const int64_t prefill =
      std::max(config_.min_prefill_chunk,
               cost_.prefill_tokens_within(decodes, std::max<int64_t>(0, chunk_start), budget_ms(decodes)));
  return std::min(fixed, decodes.decode_rows + prefill);
}

int64_t StepBudget::seq_cap(int64_t active) const {
  const int64_t depth = std::max(1, config_.pipeline_depth);
  if (depth == 1) return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(1, (std::min(max_seqs_, active) + depth - 1) / depth);
}

}  // namespace peregrine
