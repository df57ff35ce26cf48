#pragma once
// How much one step may carry, decided before the Scheduler fills it (the Scheduler owns it):
//   tokens:  max_batched_tokens, or with a step-time budget (max_step_ms, latency-aware chunked
//            prefill, "decode priority") the running decodes and their drafts plus the prefill
//            tokens the step-time model (step_cost.h, learned while serving) says fit beside them,
//            at least min_prefill_chunk so prompts still progress. The budget is a number of
//            milliseconds, or (kAutoStepBudget, what `serve` and `bench-serve` use unless told)
//            derived from the measured costs: kAutoStepFactor times the predicted time of the
//            step's decodes alone, so a step that carries prompt tokens delays each stream by at
//            most that many ordinary steps' time (the inter-token latency's p99 stays within about
//            that multiple of its median) while prompts still move in chunks that keep most of the
//            step's time on them. With no sequence decoding no
//            stream waits on the step, so prompts take whole chunks (the time to their first
//            token is all that is at stake then). Until the model has seen enough steps, streams
//            get kWarmupChunks minimal chunks beside them, not whole ones: a burst of arrivals at
//            start would otherwise stall the first streams for seconds while the model learns.
//   sequences: max_seqs; a runner that keeps `pipeline_depth` steps in flight (a pipeline of that
//            many stages) gets steps of at most its share of the sequences there are (up to
//            max_seqs), so the stages stay busy with micro-batches of about equal size.
#include <cstdint>
#include <span>

#include "engine/sequence.h"
#include "engine/step_cost.h"

namespace peregrine {

// max_step_ms's value for a budget derived from the measured step costs.
inline constexpr double kAutoStepBudget = -1;
// The derived budget in ordinary (decode-only) steps: 2.5 keeps a stream's worst gap near 2.5 of
// its usual ones (measured with prediction error and load: ITL p99 ~4-5x p50; 3 gave 5-6x) and
// gives prompts 60 % of each step they share.
inline constexpr double kAutoStepFactor = 2.5;

struct StepBudgetConfig {
  // > 0: each step's predicted time stays within this many ms; kAutoStepBudget: within
  // kAutoStepFactor x its decodes' predicted time; 0 = fixed chunks of up to max_batched_tokens
  // ("prefill priority": shortest time to first token, longest stalls).
  double max_step_ms = 0;
  int64_t min_prefill_chunk = 16;
  int pipeline_depth = 1;  // steps the runner keeps in flight (ModelRunner::max_in_flight)
};

class StepBudget {
 public:
  StepBudget(int64_t max_batched_tokens, int64_t max_seqs, StepBudgetConfig config);

  // This step's token budget, given the running sequences (their drafts already proposed).
  int64_t tokens(std::span<Sequence* const> running) const;
  // The step-time budget for a step whose decodes (drafts included) are `decodes`: max_step_ms,
  // or the derived one (0 until the cost model is ready); 0 with fixed chunks.
  double budget_ms(const StepShape& decodes) const;
  // This step's sequence cap with `active` sequences running or waiting.
  int64_t seq_cap(int64_t active) const;
  // A step of that shape took `ms`.
  void observe(const StepShape& step, double ms) { cost_.observe(step, ms); }
  const StepCostModel& cost() const { return cost_; }

 private:
  int64_t max_batched_tokens_, max_seqs_;
  StepBudgetConfig config_;
  StepCostModel cost_;
};

}  // namespace peregrine
