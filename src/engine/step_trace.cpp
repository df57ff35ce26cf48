#include "engine/step_trace.h"

#include <algorithm>

namespace peregrine {

StepTrace::StepTrace()
    : origin_(std::chrono::steady_clock::now()), steps_(kSteps), cells_(static_cast<size_t>(kSteps) * kSlots) {
  owner_.fill(-1);
}

// The slot `request` holds, or the first free one; -1 when every slot is taken.
int StepTrace::slot_for(RequestId request) {
  int free_slot = -1;
  for (int i = 0; i < kSlots; ++i) {
    if (owner_[static_cast<size_t>(i)] == request) return i;
    if (free_slot < 0 && owner_[static_cast<size_t>(i)] == -1) free_slot = i;
  }
  if (free_slot >= 0) owner_[static_cast<size_t>(free_slot)] = request;
  return free_slot;
}

void StepTrace::record(std::span<const TracedChunk> chunks, double ms, double predicted_ms, double budget_ms) {
  const double end_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t step = ++last_step_;
  const auto row = static_cast<size_t>((step - 1) % kSteps);
  StepSummary& s = steps_[row];
  s = StepSummary{};
  s.step = step;
  s.end_s = end_s;
  s.ms = ms;
  s.predicted_ms = predicted_ms;
  s.budget_ms = budget_ms;
  const std::span<SlotCell> cells(cells_.data() + row * kSlots, kSlots);
  std::fill(cells.begin(), cells.end(), SlotCell{});
  for (const TracedChunk& c : chunks) {
    (c.prefill ? s.prefill_tokens : s.decode_rows) += c.tokens;
    // Row i of the chunk attends to positions [0, start + i]: start·n + n(n+1)/2 pairs.
    const int64_t n = c.tokens;
    s.context_tokens += c.start + n;
    s.attention_pairs += c.start * n + n * (n + 1) / 2;
    const int slot = slot_for(c.request);
    if (slot < 0) {
      ++s.unslotted;
      continue;
    }
    cells[static_cast<size_t>(slot)] = {c.request, c.prefill ? SlotPhase::Prefill : SlotPhase::Decode, c.tokens};
  }
}

void StepTrace::release(RequestId request) {
  std::lock_guard<std::mutex> lock(mu_);
  for (RequestId& owner : owner_) {
    if (owner == request) owner = -1;
  }
}

int64_t StepTrace::copy_since(int64_t after_step, std::vector<StepSummary>& steps, std::vector<SlotCell>& cells) const {
  steps.clear();
  cells.clear();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t first = std::max(after_step + 1, last_step_ - kSteps + 1);
  for (int64_t step = std::max<int64_t>(first, 1); step <= last_step_; ++step) {
    const auto row = static_cast<size_t>((step - 1) % kSteps);
    steps.push_back(steps_[row]);
    cells.insert(cells.end(), cells_.begin() + static_cast<std::ptrdiff_t>(row * kSlots),
                 cells_.begin() + static_cast<std::ptrdiff_t>((row + 1) * kSlots));
  }
  return last_step_;
}

}  // namespace peregrine
