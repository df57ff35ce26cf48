#include "backend/moe_routing.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace peregrine {
namespace {

// Index of the largest value not yet taken; ties go to the lowest index, NaN loses to any number.
int32_t best_untaken(std::span<const float> p, std::span<const bool> taken) {
  int32_t best = -1;
  for (int32_t e = 0; e < static_cast<int32_t>(p.size()); ++e) {
    if (taken[static_cast<size_t>(e)]) continue;
    if (best < 0 || p[static_cast<size_t>(e)] > p[static_cast<size_t>(best)] ||
        (std::isnan(p[static_cast<size_t>(best)]) && !std::isnan(p[static_cast<size_t>(e)]))) {
      best = e;
    }
  }
  return best;
}

// In-place softmax of x (max subtracted first, sum in index order).
void softmax_in_place(std::span<float> x) {
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  float sum = 0.f;
  for (float& v : x) sum += (v = std::exp(v - mx));
  for (float& v : x) v /= sum;
}

}  // namespace

void route_token(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                 std::span<float> weights) {
  const auto n = static_cast<size_t>(r.n_experts), k = static_cast<size_t>(r.n_used);
  if (r.n_experts < 1 || r.n_experts > kMaxExperts || r.n_used < 1 || r.n_used > r.n_experts ||
      logits.size() != n || experts.size() != k || weights.size() != k) {
    throw std::invalid_argument("route_token: sizes do not match the routing");
  }
  std::array<float, kMaxExperts> p{};
  std::array<bool, kMaxExperts> taken{};
  const std::span<float> probs(p.data(), n);
  std::copy(logits.begin(), logits.end(), probs.begin());
  if (r.gating == MoeGating::Softmax) softmax_in_place(probs);
  if (r.gating == MoeGating::Sigmoid) {
    for (float& v : probs) v = 1.f / (1.f + std::exp(-v));
  }
  for (size_t i = 0; i < k; ++i) {
    const int32_t e = best_untaken(probs, std::span<const bool>(taken.data(), n));
    taken[static_cast<size_t>(e)] = true;
  }
  size_t j = 0;
  for (size_t e = 0; e < n; ++e) {
    if (!taken[e]) continue;
    experts[j] = static_cast<int32_t>(e);
    weights[j++] = probs[e];
  }
  if (r.gating == MoeGating::SoftmaxTopK) softmax_in_place(weights);
  if (r.normalize) {
    float sum = 0.f;
    for (float w : weights) sum += w;
    sum = std::max(sum, 6.103515625e-5f);
    for (float& w : weights) w /= sum;
  }
  if (r.scale != 1.f) {
    for (float& w : weights) w *= r.scale;
  }
}

}  // namespace peregrine
