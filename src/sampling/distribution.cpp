#include "sampling/distribution.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sampling/rng.h"

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

int32_t draw(const TokenDistribution& d, const DrawKey& key) {
  if (d.greedy) return d.ids.front();
  const uint64_t step_key = draw_step_key(key.seed, key.step);
  const auto race_time = [&](size_t i, double u) { return -std::log(u) / d.weights[i]; };
  // The heaviest candidate runs first: its time bounds the others', and most of a vocabulary
  // then loses without a logarithm, since -log u >= 1 - u.
  size_t best = static_cast<size_t>(std::max_element(d.weights.begin(), d.weights.end()) - d.weights.begin());
  double best_time = race_time(best, open_unit(draw_bits(step_key, static_cast<uint32_t>(d.ids[best]))));
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double w = d.weights[i];
    if (i == best || !(w > 0)) continue;
    const double u = open_unit(draw_bits(step_key, static_cast<uint32_t>(d.ids[i])));
    if (1.0 - u >= w * best_time) continue;  // its time -log(u) / w exceeds best_time
    const double t = race_time(i, u);
    if (t < best_time || (t == best_time && d.ids[i] < d.ids[best])) {
      best = i;
      best_time = t;
    }
  }
  return d.ids[best];
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

double shared_mass(const TokenDistribution& p, const TokenDistribution& q) {
  return std::max(0.0, 1.0 - residual(p, q).total);
}

double coupled_agreement(const TokenDistribution& p, const TokenDistribution& q) {
  if (!(p.total > 0) || !(q.total > 0)) return 0.0;
  const auto ps = by_id(p), qs = by_id(q);
  struct Y {
    double ratio, p, q;  // ratio = p / q (inf where q = 0)
  };
  std::vector<Y> ys;
  size_t j = 0;
  const auto add = [&](double pp, double qq) {
    if (pp > 0 || qq > 0) ys.push_back({qq > 0 ? pp / qq : std::numeric_limits<double>::infinity(), pp, qq});
  };
  for (const auto& [id, pp] : ps) {
    for (; j < qs.size() && qs[j].first < id; ++j) add(0.0, qs[j].second);
    const bool both = j < qs.size() && qs[j].first == id;
    add(pp, both ? qs[j++].second : 0.0);
  }
  for (; j < qs.size(); ++j) add(0.0, qs[j].second);
  std::sort(ys.begin(), ys.end(), [](const Y& a, const Y& b) { return a.ratio < b.ratio; });
  std::vector<double> q_below(ys.size() + 1, 0.0), p_above(ys.size() + 1, 0.0);  // q of ys[0, i), p of ys[i, n)
  for (size_t i = 0; i < ys.size(); ++i) q_below[i + 1] = q_below[i] + ys[i].q;
  for (size_t i = ys.size(); i-- > 0;) p_above[i] = p_above[i + 1] + ys[i].p;
  double agree = 0.0;
  for (const Y& x : ys) {
    if (x.p <= 0 || x.q <= 0) continue;
    // p_x * sum_y max(p_y / p_x, q_y / q_x) = sum_y max(p_y, q_y r), r = p_x / q_x: p_y where
    // ratio_y >= r, else q_y r.
    const auto split = static_cast<size_t>(
        std::lower_bound(ys.begin(), ys.end(), x.ratio, [](const Y& y, double r) { return y.ratio < r; }) - ys.begin());
    agree += x.p / (p_above[split] + x.ratio * q_below[split]);
  }
  return agree;
}

}  // namespace peregrine
