#pragma once
// How long a forward pass takes, learned while serving, so the scheduler can size each step's
// prefill chunk to a time budget (latency-aware chunked prefill): decoding streams wait for the
// whole step, so a step that swallows a 512-token chunk stalls every one of them.
//
// Model: ms = a + b * decode_rows + c * prefill_tokens, fitted by recursive least squares with
// forgetting (recent steps weigh most: the machine's speed drifts), on every step the engine
// runs. Attention's growth with context is folded into the per-token costs, which the forgetting
// keeps current.
#include <array>
#include <cstdint>

namespace peregrine {

class StepCostModel {
 public:
  // forgetting in (0, 1]: the weight of a step `n` steps ago is forgetting^n.
  explicit StepCostModel(double forgetting = 0.95);

  void observe(int64_t decode_rows, int64_t prefill_tokens, double ms);
  // Whether enough varied steps were seen for predictions (both kinds of rows, a positive cost
  // per prefill token); once true it stays true.
  bool ready() const;
  double predict_ms(int64_t decode_rows, int64_t prefill_tokens) const;
  // Prefill tokens that fit a step with `decode_rows` decodes in `budget_ms` (>= 0).
  int64_t prefill_tokens_within(int64_t decode_rows, double budget_ms) const;
  // Whether such a step is past the ridge: its rows cost more than the step's fixed part (mostly
  // reading every weight once), so adding rows adds time instead of riding along for free.
  // Meaningful only once ready().
  bool compute_bound(int64_t decode_rows, int64_t prefill_tokens) const;

  double fixed_ms() const { return w_[0]; }
  double ms_per_decode_row() const { return w_[1]; }
  double ms_per_prefill_token() const { return w_[2]; }

 private:
  double forgetting_;
  std::array<double, 3> w_{0, 0, 0};               // a, b, c
  std::array<std::array<double, 3>, 3> p_{};       // inverse covariance (RLS)
  int64_t n_decode_steps_ = 0, n_prefill_steps_ = 0;
  bool ready_ = false;
};

}  // namespace peregrine
