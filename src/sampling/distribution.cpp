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

int32_t draw(const TokenDistribution& d, double unit) { return d.greedy ? d.ids.front() : d.ids[pick(d, unit)]; }

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

double shared_mass(const TokenDistribution& p, const TokenDistribution& q) {
  return std::max(0.0, 1.0 - residual(p, q).total);
}

namespace {

struct Interval {
  int32_t id;
  double lo, hi;  // the uniforms in [lo, hi) that draw id
};

// The interval of [0, 1) each id of d is drawn for, sorted by id. A greedy distribution draws its
// id for every uniform.
std::vector<Interval> intervals_by_id(const TokenDistribution& d) {
  std::vector<Interval> out;
  if (d.greedy) {
    out.push_back({d.ids.front(), 0.0, 1.0});
    return out;
  }
  double cumulative = 0.0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double lo = cumulative / d.total;
    cumulative += std::max(0.0, d.weights[i]);
    out.push_back({d.ids[i], lo, cumulative / d.total});
  }
  std::sort(out.begin(), out.end(), [](const Interval& a, const Interval& b) { return a.id < b.id; });
  return out;
}

}  // namespace

double coupled_agreement(const TokenDistribution& p, const TokenDistribution& q) {
  if (!(p.total > 0) || !(q.total > 0)) return 0.0;
  const auto ps = intervals_by_id(p), qs = intervals_by_id(q);
  double agree = 0.0;
  size_t j = 0;
  for (const Interval& a : ps) {
    while (j < qs.size() && qs[j].id < a.id) ++j;
    if (j == qs.size()) break;
    if (qs[j].id == a.id) agree += std::max(0.0, std::min(a.hi, qs[j].hi) - std::max(a.lo, qs[j].lo));
  }
  return agree;
}

}  // namespace peregrine
