#pragma once
// The arithmetic of `peregrine perplexity`: each scored position's log-softmax, the running sums
// that give perplexity and its standard error, and the KL-divergence statistics against a saved
// base run. Kept apart from the command so the numbers have one definition (docs/perplexity.md
// states them).
#include <cstdint>
#include <span>
#include <vector>

namespace peregrine::cli {

// One position's distribution, from its logits: the negative log-likelihood of the token that
// follows, and the log-probabilities (float, as saved) of every token.
struct PositionScore {
  double nll = 0;       // max + log Σ exp(l - max) - l[target], the sum in double
  double log_sum = 0;   // max + log Σ exp(l - max): log-probability i = l[i] - log_sum
  int32_t top = 0;      // argmax of the log-probabilities (the first of equal ones)
};
// `log_probs` (if not empty, size = logits.size()) receives float(l[i] - log_sum).
PositionScore score_position(std::span<const float> logits, int32_t target, std::span<float> log_probs);

// Mean and standard error of a sample kept as sums: sd / sqrt(n - 1), where sd² = Σx²/n - mean².
struct MeanError {
  double mean = 0, error = 0;
};
MeanError mean_and_error(double sum, double sum2, int64_t n);

// Perplexity = exp(mean NLL); its standard error by the delta method: ppl x SE(mean NLL).
class NllAccumulator {
 public:
  void add(double nll) {
    sum_ += nll;
    sum2_ += nll * nll;
    ++n_;
  }
  int64_t count() const { return n_; }
  double sum() const { return sum_; }
  double sum2() const { return sum2_; }
  MeanError nll() const { return mean_and_error(sum_, sum2_, n_); }
  double perplexity() const;
  double perplexity_error() const;

 private:
  double sum_ = 0, sum2_ = 0;
  int64_t n_ = 0;
};

// Value at `fraction` of the sorted values, interpolating linearly between neighbours
// (fraction x (n - 1)); the first for 0, the last for 1.
double percentile(std::span<const double> sorted, double fraction);

// A saved base position: its NLL, and either the whole distribution (top_ids empty: log_probs has
// every token, in vocabulary order) or the top K tokens (ids and log-probabilities, most likely
// first) plus the log of the probability left to all others.
struct BasePosition {
  double nll = 0;
  float log_rest = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> log_probs;
  int32_t top() const;  // the base's most likely token
};

// KL(base || this run) at one position. `log_probs` are this run's (score_position's), `in_top`
// a scratch of n_vocab flags. With the whole base distribution the divergence is exact; with the
// top K, the tokens outside them count as one outcome (their summed probabilities), which gives a
// lower bound (the log-sum inequality), exact when the base puts nothing outside its top K.
double kl_divergence(const BasePosition& base, std::span<const float> log_probs, std::vector<uint8_t>& in_top);

// The k most likely tokens (ties: the lower id first), most likely first.
std::vector<int32_t> top_tokens(std::span<const float> log_probs, int64_t k);
// log Σ exp(log_probs[i]) over the tokens not flagged in `in_top` (-inf if none has any mass).
float log_mass_outside(std::span<const float> log_probs, std::span<const uint8_t> in_top);

// The comparison of a run with its base over every scored position.
class KldAccumulator {
 public:
  void add(double nll, double nll_base, double kld, bool same_top);

  int64_t count() const { return static_cast<int64_t>(kld_.size()); }
  NllAccumulator run, base;
  // Δ perplexity and its standard error, with the two runs' correlation (Cov of their NLLs).
  double delta_perplexity() const { return run.perplexity() - base.perplexity(); }
  double delta_perplexity_error() const;
  MeanError kld() const { return mean_and_error(kld_sum_, kld_sum2_, count()); }
  MeanError same_top() const;  // share of positions whose top tokens agree, binomial error
  // Sorted KL divergences (for percentiles); sorts on first call after add().
  std::span<const double> sorted_kld();

 private:
  double cross_ = 0;  // Σ nll x nll_base
  double kld_sum_ = 0, kld_sum2_ = 0;
  int64_t same_top_ = 0;
  std::vector<double> kld_;
  bool sorted_ = true;
};

}  // namespace peregrine::cli
