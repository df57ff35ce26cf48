#include "sampling/filters.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kernels/ops.h"

namespace peregrine {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float max_logit(std::span<const Candidate> cands) {
  float m = kNegInf;
  for (const auto& c : cands) m = std::max(m, c.logit);
  return m;
}
}  // namespace

void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias) {
  for (const auto& [token, delta] : bias) logits[static_cast<size_t>(token)] += delta;
}

bool penalties_active(const PenaltyParams& p) {
  return p.last_n != 0 && (p.repetition != 1.0f || p.frequency != 0.0f || p.presence != 0.0f);
}

std::span<const int32_t> penalty_window(std::span<const int32_t> history, int32_t last_n) {
  if (last_n < 0 || static_cast<size_t>(last_n) >= history.size()) return history;
  return history.last(static_cast<size_t>(last_n));
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> window,
                     const PenaltyParams& p) {
  if (!penalties_active(p) || window.empty()) return;
  // Sorting a copy of the window counts occurrences without a vocabulary-sized table, and the
  // window is short (64 by default).
  std::vector<int32_t> sorted(window.begin(), window.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    const auto count = static_cast<float>(j - i);
    float& logit = logits[static_cast<size_t>(sorted[i])];
    if (p.repetition != 1.0f) logit = logit > 0.0f ? logit / p.repetition : logit * p.repetition;
    logit -= count * p.frequency + p.presence;  // count > 0 here, so presence applies once
    i = j;
  }
}

int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lower id
  return static_cast<int32_t>(best);
}

void finite_candidates(std::span<const float> logits, std::vector<Candidate>& out) {
  out.clear();
  out.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != kNegInf) out.push_back({static_cast<int32_t>(i), logits[i]});
}

float max_value(std::span<const float> x) {
  // Eight running maxima: one chain of dependent max operations ran at one element per ~4
  // cycles (~140 us for a 128k vocabulary).
  std::array<float, 8> m;
  m.fill(kNegInf);
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) m[j] = std::max(m[j], x[i + j]);
  for (; i < x.size(); ++i) m[0] = std::max(m[0], x[i]);
  return *std::max_element(m.begin(), m.end());
}

bool any_nan_or_pos_inf(std::span<const float> x) {
  // !(v < +inf) holds exactly for NaN and +inf; eight flags for the same reason as max_value.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::array<bool, 8> bad{};
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) bad[j] |= !(x[i + j] < kInf);
  for (; i < x.size(); ++i) bad[0] |= !(x[i] < kInf);
  return std::find(bad.begin(), bad.end(), true) != bad.end();
}

void top_k_candidates(std::span<const float> logits, int32_t k, std::vector<Candidate>& out) {
  const auto better = [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); };
  out.clear();
  if (logits.empty()) return;
  // A request may ask for any k (the API allows up to 2^20): the buffer never outgrows the
  // vocabulary, so a huge k costs what k = n_vocab does.
  const size_t keep = std::min(static_cast<size_t>(std::max(k, 1)), logits.size());
  // One pass in id order holding the best `keep` seen so far plus a buffer of newcomers: a logit
  // enters only above the keep-th best logit seen when the buffer was last cut (a tie with it has
  // a higher id, so it ranks after it and could not be kept). After the first few thousand tokens
  // nearly every logit fails that one comparison, so a 128k vocabulary costs about one compare
  // per token; nth_element over all candidates moved each about three times.
  const size_t cut_at = std::min(std::max<size_t>(4 * keep, 256), logits.size());  // >= keep
  out.reserve(cut_at);
  float threshold = kNegInf;  // -inf tokens never enter
  const auto cut = [&] {
    std::nth_element(out.begin(), out.begin() + static_cast<ptrdiff_t>(keep - 1), out.end(), better);
    out.resize(keep);
    threshold = out[keep - 1].logit;  // the keep-th best: out[0, keep) rank before it or are it
  };
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!(logits[i] > threshold)) continue;
    out.push_back({static_cast<int32_t>(i), logits[i]});
    if (out.size() == cut_at) cut();
  }
  if (out.size() > keep) cut();
  std::sort(out.begin(), out.end(), better);
}

namespace {

// Moves the best candidates of cands[lo, hi) to its front until their mass (weights w, parallel
// to cands) reaches `need`, by quickselect on mass: expected O(n) instead of a sort. Returns the
// end of the kept prefix. The partition is hand-written (not std::partition) so the resulting
// order, and hence the summation order, is the same with every standard library.
size_t select_by_mass(std::vector<Candidate>& cands, std::vector<double>& w, double need) {
  size_t lo = 0, hi = cands.size();
  auto swap_at = [&](size_t a, size_t b) {
    std::swap(cands[a], cands[b]);
    std::swap(w[a], w[b]);
  };
  while (hi - lo > 32) {
    // Median of three as pivot, moved to hi - 1.
    const size_t mid = lo + (hi - lo) / 2;
    if (ranks_before(cands[mid], cands[lo])) swap_at(mid, lo);
    if (ranks_before(cands[hi - 1], cands[lo])) swap_at(hi - 1, lo);
    if (ranks_before(cands[mid], cands[hi - 1])) swap_at(mid, hi - 1);
    const Candidate pivot = cands[hi - 1];
    size_t store = lo;
    double better_mass = 0.0;
    for (size_t i = lo; i + 1 < hi; ++i) {
      if (ranks_before(cands[i], pivot)) {
        better_mass += w[i];
        swap_at(i, store++);
      }
    }
    swap_at(store, hi - 1);  // pivot now sits right after everything that ranks before it
    if (better_mass >= need) {
      hi = store;
    } else if (better_mass + w[store] >= need) {
      return store + 1;
    } else {
      need -= better_mass + w[store];
      lo = store + 1;
    }
  }
  // A short range left: finish by walking it in rank order.
  std::vector<size_t> order(hi - lo);
  for (size_t i = 0; i < order.size(); ++i) order[i] = lo + i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ranks_before(cands[a], cands[b]); });
  double cumulative = 0.0;
  for (size_t k = 0; k < order.size(); ++k) {
    cumulative += w[order[k]];
    if (cumulative >= need) {
      // Bring the chosen ones to the front of the range.
      std::vector<Candidate> chosen;
      for (size_t j = 0; j <= k; ++j) chosen.push_back(cands[order[j]]);
      std::copy(chosen.begin(), chosen.end(), cands.begin() + static_cast<ptrdiff_t>(lo));
      return lo + k + 1;
    }
  }
  return hi;  // rounding left the total just short of the target: keep the whole range
}

}  // namespace

void keep_top_p(std::vector<Candidate>& cands, float top_p) {
  if (top_p >= 1.0f || cands.empty()) return;
  const double max = max_logit(cands);
  std::vector<double> w(cands.size());
  double total = 0.0;
  for (size_t i = 0; i < cands.size(); ++i) {
    w[i] = std::exp(static_cast<double>(cands[i].logit) - max);
    total += w[i];
  }
  const double target = static_cast<double>(top_p) * total;
  if (std::is_sorted(cands.begin(), cands.end(), ranks_before)) {  // e.g. after top-k
    double cumulative = 0.0;
    for (size_t i = 0; i < cands.size(); ++i) {
      cumulative += w[i];
      if (cumulative >= target) {
        cands.resize(i + 1);
        return;
      }
    }
    return;
  }
  // Select on a copy, then filter the original by the boundary candidate: the kept set stays in
  // its input order and nothing is sorted.
  std::vector<Candidate> work(cands);
  const size_t keep = select_by_mass(work, w, target);
  Candidate boundary = work[0];
  for (size_t i = 1; i < keep; ++i)
    if (ranks_before(boundary, work[i])) boundary = work[i];
  std::erase_if(cands, [&](const Candidate& c) { return ranks_before(boundary, c); });
}

void keep_min_p(std::vector<Candidate>& cands, float min_p) {
  if (min_p <= 0.0f || cands.empty()) return;
  const double threshold = static_cast<double>(max_logit(cands)) + std::log(static_cast<double>(min_p));
  std::erase_if(cands, [threshold](const Candidate& c) {
    return static_cast<double>(c.logit) < threshold;
  });
}

size_t draw_index(std::span<const Candidate> cands, float temperature, double unit,
                  std::vector<double>& weights) {
  const double max = max_logit(cands);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  weights.resize(cands.size());
  double total = 0.0;
  for (size_t i = 0; i < cands.size(); ++i) {
    weights[i] = std::exp((static_cast<double>(cands[i].logit) - max) * inv_t);
    total += weights[i];
  }
  const double target = unit * total;
  double cumulative = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    last_nonzero = i;
    cumulative += weights[i];
    if (target < cumulative) return i;
  }
  return last_nonzero;
}

size_t draw_index(std::span<const Candidate> cands, float temperature, double unit) {
  std::vector<double> weights;
  return draw_index(cands, temperature, unit, weights);
}

double log_sum_exp(std::span<const float> logits) { return log_sum_exp(logits, max_value(logits)); }

double log_sum_exp(std::span<const float> logits, float max) {
  if (max == kNegInf) return -std::numeric_limits<double>::infinity();
  // Each term by the kernels' vector exp (a relative error of ~2e-7), summed in double: a double
  // exp per vocabulary entry took 0.7 ms a token on a 128k vocabulary, and every reported token
  // pays it.
  const double sum = sum_exp(logits, max);
  return static_cast<double>(max) + std::log(sum);
}

std::vector<Candidate> best_n(std::span<const float> logits, size_t n) {
  // n is small (<= 20): keep a sorted list of the best seen so far instead of ranking all V.
  std::vector<Candidate> best;
  if (n == 0) return best;
  best.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kNegInf) continue;
    const Candidate c{static_cast<int32_t>(i), logits[i]};
    if (best.size() == n && !ranks_before(c, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), c, ranks_before), c);
    if (best.size() > n) best.pop_back();
  }
  return best;
}

}  // namespace peregrine
