#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>

namespace peregrine {
namespace {

// Steps of each kind (with and without prefill tokens) before predictions are trusted.
constexpr int64_t kWarmupSteps = 3;

}  // namespace

StepCostModel::StepCostModel(double forgetting) : forgetting_(forgetting) {
  for (int i = 0; i < 3; ++i) p_[i][i] = 1e4;  // a weak prior: any first observations dominate
}

void StepCostModel::observe(int64_t decode_rows, int64_t prefill_tokens, double ms) {
  if (!(ms >= 0) || !std::isfinite(ms)) return;
  const std::array<double, 3> x = {1.0, static_cast<double>(decode_rows), static_cast<double>(prefill_tokens)};
  // Standard RLS update: k = P x / (lambda + x' P x); w += k (y - w'x); P = (P - k x' P) / lambda.
  std::array<double, 3> px{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) px[i] += p_[i][j] * x[j];
  }
  double denom = forgetting_;
  for (int i = 0; i < 3; ++i) denom += x[i] * px[i];
  const double err = ms - (w_[0] * x[0] + w_[1] * x[1] + w_[2] * x[2]);
  for (int i = 0; i < 3; ++i) w_[i] += px[i] / denom * err;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) p_[i][j] = (p_[i][j] - px[i] * px[j] / denom) / forgetting_;
  }
  // Forgetting inflates the covariance along directions the steps never vary in (a server that
  // only decodes): cap it so the next informative step does not swing the fit wildly.
  const double trace = p_[0][0] + p_[1][1] + p_[2][2];
  if (trace > 1e6) {
    for (auto& row : p_) {
      for (double& v : row) v *= 1e6 / trace;
    }
  }
  (prefill_tokens > 0 ? n_prefill_steps_ : n_decode_steps_) += 1;
  // Latched: once trusted, a noisy step that drags the fitted prefill cost to zero or below must
  // not flip the engine back to whole 512-token chunks (a stall for every stream) until the fit
  // recovers; prefill_tokens_within() answers conservatively meanwhile.
  if (n_prefill_steps_ >= kWarmupSteps && n_decode_steps_ >= kWarmupSteps && w_[2] > 0) ready_ = true;
}

bool StepCostModel::ready() const { return ready_; }

double StepCostModel::predict_ms(int64_t decode_rows, int64_t prefill_tokens) const {
  return std::max(0.0, w_[0]) + std::max(0.0, w_[1]) * static_cast<double>(decode_rows) +
         std::max(0.0, w_[2]) * static_cast<double>(prefill_tokens);
}

int64_t StepCostModel::prefill_tokens_within(int64_t decode_rows, double budget_ms) const {
  const double left = budget_ms - predict_ms(decode_rows, 0);
  if (left <= 0 || w_[2] <= 0) return 0;
  return static_cast<int64_t>(std::floor(left / w_[2]));
}

bool StepCostModel::compute_bound(int64_t decode_rows, int64_t prefill_tokens) const {
  const double fixed = std::max(0.0, w_[0]);
  return predict_ms(decode_rows, prefill_tokens) - fixed > fixed;
}

}  // namespace peregrine
