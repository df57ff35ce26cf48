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

// The least-squares fit of the normal equations xx w = xy with every cost w >= 0. Unconstrained,
// steps the terms barely vary apart in trade one term for another: one decode row for seconds
// and two whole prompts seen beside none put a at -250 ms and b at +260 ms a row, right for the
// steps seen and a 550 ms budget for the first step with two decodes. The constrained optimum is
// the unconstrained fit on some subset of the terms (the rest at 0): the best of the 16 subsets'
// fits that come out non-negative, by their weighted squared error w' xx w - 2 w' xy.
StepCostModel::Vec fit_nonnegative(const std::array<StepCostModel::Vec, StepCostModel::kTerms>& xx,
                                   const StepCostModel::Vec& xy) {
  constexpr int n = StepCostModel::kTerms;
  StepCostModel::Vec best{};
  double best_err = 0;  // the all-zero fit's
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::array<int, n> idx{};
    int k = 0;
    for (int i = 0; i < n; ++i) {
      if (mask & (1u << i)) idx[static_cast<size_t>(k++)] = i;
    }
    // The subset's equations, padded with identity rows so one fixed-size solve serves every k.
    std::array<StepCostModel::Vec, n> a{};
    StepCostModel::Vec b{};
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) a[r][c] = r < k && c < k ? xx[idx[r]][idx[c]] : (r == c ? 1.0 : 0.0);
      b[r] = r < k ? xy[idx[r]] : 0.0;
    }
    const StepCostModel::Vec sub = solve(a, b);
    StepCostModel::Vec w{};
    bool ok = true;
    for (int r = 0; r < k; ++r) {
      ok = ok && std::isfinite(sub[r]) && sub[r] >= 0;
      w[idx[r]] = sub[r];
    }
    if (!ok) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) err += w[i] * xx[i][j] * w[j];
      err -= 2 * w[i] * xy[i];
    }
    if (err < best_err) best_err = err, best = w;
  }
  return best;
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
  w_ = fit_nonnegative(xx, xy);
  (step.prefill_tokens > 0 ? n_prefill_steps_ : n_decode_steps_) += 1;
  // Latched: once trusted, a noisy step that drags the fitted prefill cost to zero or below must
  // not flip the engine back to whole 512-token chunks (a stall for every stream) until the fit
  // recovers; prefill_tokens_within() answers conservatively meanwhile.
  if (n_prefill_steps_ >= kWarmupSteps && n_decode_steps_ >= kWarmupSteps && w_[2] > 0) ready_ = true;
}

bool StepCostModel::ready() const { return ready_; }

double StepCostModel::predict_ms(const StepShape& step) const {
  const Vec x = features(step);
  double ms = 0;
  for (int i = 0; i < kTerms; ++i) ms += w_[i] * x[i];
  return ms;
}

int64_t StepCostModel::prefill_tokens_within(const StepShape& decodes, int64_t chunk_start, double budget_ms) const {
  const double left = budget_ms - predict_ms(decodes);
  if (left <= 0 || w_[2] <= 0) return 0;
  // n tokens from chunk_start add c n + d (chunk_start n + n (n + 1) / 2) / 1000 ms: the largest
  // n within `left` is the positive root of that quadratic (a line when attention looks free).
  const double d = w_[3] / 1000.0;
  const double quad = d / 2, lin = w_[2] + d * (static_cast<double>(chunk_start) + 0.5);
  const double n = quad > 0 ? (std::sqrt(lin * lin + 4 * quad * left) - lin) / (2 * quad) : left / lin;
  return static_cast<int64_t>(std::floor(n));
}

bool StepCostModel::compute_bound(const StepShape& step) const { return predict_ms(step) - w_[0] > w_[0]; }

}  // namespace peregrine
