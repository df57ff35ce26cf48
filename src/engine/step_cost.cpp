#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace peregrine {
namespace {

// Steps of each kind (with and without prefill tokens) before predictions are trusted.
constexpr int64_t kWarmupSteps = 3;
// Added to the normal equations' diagonal: keeps them solvable before the steps have varied in
// every term, and tiny beside what any step contributes (1 to the constant term's diagonal).
constexpr double kRidge = 1e-6;

// Solves a x = b in place (Gaussian elimination with partial pivoting); a is positive definite.
template <size_t N>
std::array<double, N> solve(std::array<std::array<double, N>, N> a, std::array<double, N> b) {
  for (size_t col = 0; col < N; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < N; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < N; ++r) {
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c < N; ++c) a[r][c] -= f * a[col][c];
      b[r] -= f * b[col];
    }
  }
  std::array<double, N> x{};
  for (size_t i = N; i-- > 0;) {
    double s = b[i];
    for (size_t c = i + 1; c < N; ++c) s -= a[i][c] * x[c];
    x[i] = s / a[i][i];
  }
  return x;
}

}  // namespace

StepCostModel::StepCostModel(double forgetting) : forgetting_(forgetting) {}

StepCostModel::Vec StepCostModel::features(const StepShape& step) {
  // Thousands of pairs, so every term's values are of a similar size (tens to hundreds).
  return {1.0, static_cast<double>(step.decode_rows), static_cast<double>(step.prefill_tokens),
          static_cast<double>(step.attention_pairs) / 1000.0};
}

void StepCostModel::observe(const StepShape& step, double ms) {
  if (!(ms >= 0) || !std::isfinite(ms)) return;
  const Vec x = features(step);
  Sums& own = sums_[step.prefill_tokens > 0 ? 1 : 0];
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) own.xx[i][j] = forgetting_ * own.xx[i][j] + x[i] * x[j];
    own.xy[i] = forgetting_ * own.xy[i] + x[i] * ms;
  }
  std::array<Vec, kTerms> xx{};
  Vec xy{};
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) xx[i][j] = sums_[0].xx[i][j] + sums_[1].xx[i][j];
    xx[i][i] += kRidge;
    xy[i] = sums_[0].xy[i] + sums_[1].xy[i];
  }
  const Vec w = solve(xx, xy);
  if (std::all_of(w.begin(), w.end(), [](double v) { return std::isfinite(v); })) w_ = w;
  (step.prefill_tokens > 0 ? n_prefill_steps_ : n_decode_steps_) += 1;
  // Latched: once trusted, a noisy step that drags the fitted prefill cost to zero or below must
  // not flip the engine back to whole 512-token chunks (a stall for every stream) until the fit
  // recovers; prefill_tokens_within() answers conservatively meanwhile.
  if (n_prefill_steps_ >= kWarmupSteps && n_decode_steps_ >= kWarmupSteps && w_[2] > 0) ready_ = true;
}

bool StepCostModel::ready() const { return ready_; }

double StepCostModel::predict_ms(const StepShape& step) const {
  // The whole sum, not each term clipped: the terms the steps never varied apart (one decode
  // row for seconds leaves a and b split arbitrarily) are only right together.
  const Vec x = features(step);
  double ms = 0;
  for (int i = 0; i < kTerms; ++i) ms += w_[i] * x[i];
  return std::max(0.0, ms);
}

int64_t StepCostModel::prefill_tokens_within(const StepShape& decodes, int64_t chunk_start, double budget_ms) const {
  const double left = budget_ms - predict_ms(decodes);
  if (left <= 0 || w_[2] <= 0) return 0;
  // n tokens from chunk_start add c n + d (chunk_start n + n (n + 1) / 2) / 1000 ms: the largest
  // n within `left` is the positive root of that quadratic (a line when attention looks free).
  const double d = std::max(0.0, w_[3]) / 1000.0;
  const double quad = d / 2, lin = w_[2] + d * (static_cast<double>(chunk_start) + 0.5);
  const double n = quad > 0 ? (std::sqrt(lin * lin + 4 * quad * left) - lin) / (2 * quad) : left / lin;
  return static_cast<int64_t>(std::floor(n));
}

bool StepCostModel::compute_bound(const StepShape& step) const {
  const double fixed = std::max(0.0, w_[0]);
  return predict_ms(step) - fixed > fixed;
}

}  // namespace peregrine
