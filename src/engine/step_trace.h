#pragma once
// The last steps the engine ran, for watching it work (the web page's live view): per step its
// time, rows and, per batch slot, which request ran there and whether it was a prefill chunk or a
// decode. A slot is a place a running sequence keeps from its first step until it finishes or is
// preempted, so the step x slot grid reads like the static-vs-continuous batching figure.
//
// Fixed memory: a ring of kSteps steps x kSlots slots, allocated once. The engine thread records
// one step at a time (O(slots) under a mutex); readers copy what is newer than the step they saw
// last, at most the whole ring, under the same mutex, so neither side can hold the other for
// long and nothing grows with the number of viewers or steps.
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "engine/request.h"

namespace peregrine {

enum class SlotPhase : uint8_t { Idle, Prefill, Decode };

struct SlotCell {
  RequestId request = -1;  // -1: idle
  SlotPhase phase = SlotPhase::Idle;
  int32_t tokens = 0;  // rows run for it this step (a prefill chunk's tokens, or 1 + drafts)
};

struct StepSummary {
  int64_t step = 0;             // 1 for the first step the engine ran
  double end_s = 0;             // when it landed, seconds since the trace began
  double ms = 0;                // forward pass and sampling, launch to land
  double predicted_ms = 0;      // what the step-time model (step_cost.h) expected; 0 before it was fitted
  double budget_ms = 0;         // the step-time budget it was sized to; 0 for fixed chunks or none yet
  int32_t decode_rows = 0;      // rows of decoding sequences (1 + drafts each)
  int32_t prefill_tokens = 0;   // prompt tokens
  int64_t context_tokens = 0;   // K/V positions read, summed over the step's sequences
  int64_t attention_pairs = 0;  // (query row, key position) pairs attention computed
  int32_t unslotted = 0;        // sequences beyond kSlots (ran, but not drawn)
};

// One scheduled chunk as the trace sees it.
struct TracedChunk {
  RequestId request;
  bool prefill;
  int32_t tokens;
  int64_t start;  // positions already in the cache before this chunk
};

class StepTrace {
 public:
  static constexpr int kSteps = 256;
  static constexpr int kSlots = 64;

  StepTrace();

  // Engine thread: one landed step, with what the step-time model predicted and the budget.
  void record(std::span<const TracedChunk> chunks, double ms, double predicted_ms = 0, double budget_ms = 0);
  // Engine thread: the request left the running set (finished, cancelled, preempted).
  void release(RequestId request);

  // Any thread: the steps after `after_step` still in the ring (oldest first), into `steps` and
  // `cells` ([steps.size()][kSlots]); both are cleared first. Returns the newest step recorded.
  int64_t copy_since(int64_t after_step, std::vector<StepSummary>& steps, std::vector<SlotCell>& cells) const;

 private:
  int slot_for(RequestId request);

  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point origin_;
  std::array<RequestId, kSlots> owner_{};  // -1: free
  std::vector<StepSummary> steps_;         // [kSteps] ring
  std::vector<SlotCell> cells_;            // [kSteps][kSlots] ring
  int64_t last_step_ = 0;
};

}  // namespace peregrine
