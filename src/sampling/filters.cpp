#include "sampling/filters.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

void keep_top_k(std::vector<Candidate>& cands, int32_t k) {
  const size_t keep = std::min(cands.size(), static_cast<size_t>(std::max(k, 1)));
  if (keep < cands.size()) {
    std::nth_element(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(keep), cands.end(),
                     ranks_before);
    cands.resize(keep);
  }
  std::sort(cands.begin(), cands.end(), ranks_before);
}

void keep_top_p(std::vector<Candidate>& cands, float top_p) {
  if (top_p >= 1.0f || cands.empty()) return;
  const double max = max_logit(cands);
  double total = 0.0;
  for (const auto& c : cands) total += std::exp(static_cast<double>(c.logit) - max);
  const double target = static_cast<double>(top_p) * total;

  // Rank in chunks that double in size: the first chunk usually holds the whole nucleus.
  const size_t n = cands.size();
  size_t ranked = 0;
  size_t chunk = 64;
  double cumulative = 0.0;
  while (ranked < n) {
    const size_t end = std::min(n, ranked + chunk);
    auto first = cands.begin() + static_cast<ptrdiff_t>(ranked);
    auto last = cands.begin() + static_cast<ptrdiff_t>(end);
    if (end < n) std::nth_element(first, last, cands.end(), ranks_before);
    std::sort(first, last, ranks_before);
    for (size_t i = ranked; i < end; ++i) {
      cumulative += std::exp(static_cast<double>(cands[i].logit) - max);
      if (cumulative >= target) {
        cands.resize(i + 1);
        return;
      }
    }
    ranked = end;
    chunk *= 2;
  }
  // Rounding kept the sum just below target: everything stays, now fully ranked.
}

void keep_min_p(std::vector<Candidate>& cands, float min_p) {
  if (min_p <= 0.0f || cands.empty()) return;
  const double threshold = static_cast<double>(max_logit(cands)) + std::log(static_cast<double>(min_p));
  std::erase_if(cands, [threshold](const Candidate& c) {
    return static_cast<double>(c.logit) < threshold;
  });
}

size_t draw_index(std::span<const Candidate> cands, float temperature, double unit) {
  const double max = max_logit(cands);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double total = 0.0;
  for (const auto& c : cands) total += std::exp((static_cast<double>(c.logit) - max) * inv_t);
  const double target = unit * total;
  double cumulative = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    const double w = std::exp((static_cast<double>(cands[i].logit) - max) * inv_t);
    if (w <= 0.0) continue;
    last_nonzero = i;
    cumulative += w;
    if (target < cumulative) return i;
  }
  return last_nonzero;
}

double log_sum_exp(std::span<const float> logits) {
  float max = kNegInf;
  for (float l : logits) max = std::max(max, l);
  if (max == kNegInf) return -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - static_cast<double>(max));
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
