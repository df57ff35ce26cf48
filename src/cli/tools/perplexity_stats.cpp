#include "cli/tools/perplexity_stats.h"

#include <algorithm>
#include <cmath>

namespace peregrine::cli {

PositionScore score_position(std::span<const float> logits, int32_t target, std::span<float> log_probs) {
  float max = logits[0];
  for (float l : logits) max = std::max(max, l);
  // Summed in double, in vocabulary order, so the result does not depend on threads.
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  PositionScore s;
  s.log_sum = max + std::log(sum);
  s.nll = s.log_sum - logits[static_cast<size_t>(target)];
  if (log_probs.empty()) {
    s.top = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    return s;
  }
  // The top token is taken from the float log-probabilities, the values a saved run keeps, so a
  // run compared with its own saved file agrees on it whatever ties the rounding makes.
  for (size_t i = 0; i < logits.size(); ++i) {
    log_probs[i] = static_cast<float>(logits[i] - s.log_sum);
    if (log_probs[i] > log_probs[static_cast<size_t>(s.top)]) s.top = static_cast<int32_t>(i);
  }
  return s;
}

MeanError mean_and_error(double sum, double sum2, int64_t n) {
  if (n < 1) return {};
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  return {mean, n > 1 && var > 0 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0};
}

double NllAccumulator::perplexity() const { return std::exp(nll().mean); }
double NllAccumulator::perplexity_error() const { return perplexity() * nll().error; }

double percentile(std::span<const double> sorted, double fraction) {
  if (sorted.empty()) return 0;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(p);
  const double f = p - static_cast<double>(i);
  return (1 - f) * sorted[i] + f * sorted[std::min(i + 1, sorted.size() - 1)];
}

int32_t BasePosition::top() const {
  if (!top_ids.empty()) return top_ids.front();
  return static_cast<int32_t>(std::max_element(log_probs.begin(), log_probs.end()) - log_probs.begin());
}

double kl_divergence(const BasePosition& base, std::span<const float> log_probs, std::vector<uint8_t>& in_top) {
  // Terms are differences of the saved floats and this run's floats, so a run against its own
  // file gives exactly 0.
  double kld = 0;
  if (base.top_ids.empty()) {
    for (size_t i = 0; i < log_probs.size(); ++i) {
      const double lp = base.log_probs[i];
      if (lp > -INFINITY) kld += std::exp(lp) * (lp - static_cast<double>(log_probs[i]));
    }
    return kld;
  }
  in_top.assign(log_probs.size(), 0);
  for (size_t k = 0; k < base.top_ids.size(); ++k) {
    const auto id = static_cast<size_t>(base.top_ids[k]);
    in_top[id] = 1;
    const double lp = base.log_probs[k];
    kld += std::exp(lp) * (lp - static_cast<double>(log_probs[id]));
  }
  if (base.log_rest > -INFINITY) {
    const double lr = base.log_rest;
    kld += std::exp(lr) * (lr - static_cast<double>(log_mass_outside(log_probs, in_top)));
  }
  return kld;
}

std::vector<int32_t> top_tokens(std::span<const float> log_probs, int64_t k) {
  std::vector<int32_t> ids(log_probs.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const auto n = static_cast<std::ptrdiff_t>(std::min<int64_t>(k, static_cast<int64_t>(ids.size())));
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    const float la = log_probs[static_cast<size_t>(a)], lb = log_probs[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  ids.resize(static_cast<size_t>(n));
  return ids;
}

float log_mass_outside(std::span<const float> log_probs, std::span<const uint8_t> in_top) {
  double rest = 0;  // in vocabulary order, the same sum for the saved run and the compared one
  for (size_t i = 0; i < log_probs.size(); ++i) {
    if (!in_top[i]) rest += std::exp(static_cast<double>(log_probs[i]));
  }
  return static_cast<float>(std::log(rest));
}

void KldAccumulator::add(double nll, double nll_base, double kld, bool same_top) {
  run.add(nll);
  base.add(nll_base);
  cross_ += nll * nll_base;
  kld_sum_ += kld;
  kld_sum2_ += kld * kld;
  same_top_ += same_top ? 1 : 0;
  kld_.push_back(kld);
  sorted_ = false;
}

double KldAccumulator::delta_perplexity_error() const {
  const auto n = static_cast<double>(count());
  if (count() < 2) return 0;
  const double cov = (cross_ / n - (run.sum() / n) * (base.sum() / n)) / (n - 1);
  const double u = run.perplexity_error(), ub = base.perplexity_error();
  const double var = u * u + ub * ub - 2 * run.perplexity() * base.perplexity() * cov;
  return var > 0 ? std::sqrt(var) : 0.0;
}

MeanError KldAccumulator::same_top() const {
  const auto n = static_cast<double>(count());
  if (count() < 1) return {};
  const double p = static_cast<double>(same_top_) / n;
  return {p, count() > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : 0.0};
}

std::span<const double> KldAccumulator::sorted_kld() {
  if (!sorted_) std::sort(kld_.begin(), kld_.end());
  sorted_ = true;
  return kld_;
}

}  // namespace peregrine::cli
