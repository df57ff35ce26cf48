#include "sampling/distribution.h"

#include <algorithm>

namespace peregrine {

double TokenDistribution::prob(int32_t id) const {
  if (total <= 0) return 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) return weights[i] / total;
  }
  return 0;
}

TokenDistribution TokenDistribution::one_hot(int32_t id) {
  TokenDistribution d;
  d.ids = {id};
  d.weights = {1.0};
  d.total = 1.0;
  d.greedy = true;
  return d;
}

size_t pick(const TokenDistribution& d, double unit) {
  const double target = unit * d.total;
  double cumulative = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    if (d.weights[i] <= 0.0) continue;
    last_nonzero = i;
    cumulative += d.weights[i];
    if (target < cumulative) return i;
  }
  return last_nonzero;
}

namespace {

// (id, probability) pairs of d in increasing id order.
std::vector<std::pair<int32_t, double>> by_id(const TokenDistribution& d) {
  std::vector<std::pair<int32_t, double>> out;
  out.reserve(d.ids.size());
  for (size_t i = 0; i < d.ids.size(); ++i) out.emplace_back(d.ids[i], d.total > 0 ? d.weights[i] / d.total : 0.0);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TokenDistribution residual(const TokenDistribution& p, const TokenDistribution& q) {
  const auto ps = by_id(p), qs = by_id(q);
  TokenDistribution r;
  size_t j = 0;
  for (const auto& [id, pp] : ps) {
    while (j < qs.size() && qs[j].first < id) ++j;
    const double qq = j < qs.size() && qs[j].first == id ? qs[j].second : 0.0;
    if (pp - qq <= 0) continue;
    r.ids.push_back(id);
    r.weights.push_back(pp - qq);
    r.total += pp - qq;
  }
  return r;
}

}  // namespace peregrine
