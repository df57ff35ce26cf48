#pragma once
// How long a forward pass takes, learned while serving, so the scheduler can size each step's
// prefill chunk to a time budget (latency-aware chunked prefill): decoding streams wait for the
// whole step, so a step that swallows a 512-token chunk stalls every one of them.
//
// Model: ms = a + b * decode_rows + c * prefill_tokens + d * attention_pairs / 1000, fitted by
// least squares with forgetting (recent steps weigh most: the machine's speed drifts) on every
// step the engine runs. The attention term is what makes a prompt's late chunks dearer than its
// early ones: a chunk's row at position p attends to p + 1 keys, so 256 tokens at positions
// 640..895 cost far more attention than 256 at 0..255; without it the fit averages the two and
// the late chunks overshoot the budget (the stalls that make the inter-token latency's p99).
//
// The fit solves the forgetting-weighted normal equations afresh each step (4 x 4, a light ridge
// keeps them solvable; every cost >= 0, see fit_nonnegative) rather than updating a recursive
// inverse: while the steps stay in a
// corner of the space (one stream decoding for seconds), the recursive form's covariance winds
// up along the directions they do not vary in and noise swings the coefficients there (a step
// with one decode predicted at 125 ms that took 20, so its budget let a prompt chunk stall the
// stream for 240 ms), which a direct solve does not. Each kind of step (decodes only, or with
// prompt tokens) forgets only its own kind: seconds of plain decoding must not erase what prompt
// tokens cost, or the next prompt's first chunk is sized from a fit that has forgotten them.
#include <array>
#include <cstdint>

namespace peregrine {

// The (query row, key position) pairs attention computes for `n` rows at positions
// [start, start + n): row i attends to start + i + 1 keys.
constexpr int64_t attention_pairs(int64_t start, int64_t n) { return start * n + n * (n + 1) / 2; }

// What a step carries, as far as its time goes.
struct StepShape {
  int64_t decode_rows = 0;      // decoding sequences' rows, drafts included
  int64_t prefill_tokens = 0;   // prompt tokens
  int64_t attention_pairs = 0;  // attention_pairs() summed over the step's chunks

  // A chunk of `n` rows at positions [start, start + n).
  void add(bool prefill, int64_t start, int64_t n) {
    (prefill ? prefill_tokens : decode_rows) += n;
    attention_pairs += peregrine::attention_pairs(start, n);
  }
};

class StepCostModel {
 public:
  static constexpr int kTerms = 4;  // a, b, c, d
  using Vec = std::array<double, kTerms>;

  // forgetting in (0, 1]: the weight of a step `n` steps ago is forgetting^n.
  explicit StepCostModel(double forgetting = 0.95);

  void observe(const StepShape& step, double ms);
  // Whether enough varied steps were seen for predictions (both kinds of rows, a positive cost
  // per prefill token); once true it stays true.
  bool ready() const;
  double predict_ms(const StepShape& step) const;
  // Prompt tokens of one chunk starting at position `chunk_start` that fit beside `decodes` in
  // `budget_ms` (>= 0).
  int64_t prefill_tokens_within(const StepShape& decodes, int64_t chunk_start, double budget_ms) const;
  // Whether such a step is past the ridge: its rows cost more than the step's fixed part (mostly
  // reading every weight once), so adding rows adds time instead of riding along for free.
  // Meaningful only once ready().
  bool compute_bound(const StepShape& step) const;

  double fixed_ms() const { return w_[0]; }
  double ms_per_decode_row() const { return w_[1]; }
  double ms_per_prefill_token() const { return w_[2]; }
  double ms_per_kilo_pair() const { return w_[3]; }  // per 1000 attention pairs

 private:
  static Vec features(const StepShape& step);

  // The normal equations of one kind of step: sums of forgetting^age x x' and x ms, the age
  // counted in steps of that kind.
  struct Sums {
    std::array<Vec, kTerms> xx{};
    Vec xy{};
  };

  double forgetting_;
  Vec w_{};                   // a, b, c, d
  std::array<Sums, 2> sums_;  // [0] decode-only steps, [1] steps with prompt tokens
  int64_t n_decode_steps_ = 0, n_prefill_steps_ = 0;
  bool ready_ = false;
};

}  // namespace peregrine
