#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "util/error.h"

namespace peregrine {

namespace {

constexpr int32_t kMaxLogprobs = 20;

[[noreturn]] void fail(const std::string& what) { throw UsageError("sampling: " + what); }

std::string show(float v) { return std::to_string(v); }

PenaltyParams penalty_params(const SamplingParams& p) {
  return {p.repetition_penalty, p.frequency_penalty, p.presence_penalty, p.penalty_last_n};
}

}  // namespace

void validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
    fail("temperature must be a finite number >= 0, got " + show(p.temperature));
  if (p.top_k < 0) fail("top_k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))  // also rejects NaN
    fail("top_p must be in (0, 1], got " + show(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    fail("min_p must be in [0, 1], got " + show(p.min_p));
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f)
    fail("repetition_penalty must be a finite number > 0, got " + show(p.repetition_penalty));
  if (!std::isfinite(p.frequency_penalty))
    fail("frequency_penalty must be finite, got " + show(p.frequency_penalty));
  if (!std::isfinite(p.presence_penalty))
    fail("presence_penalty must be finite, got " + show(p.presence_penalty));
  if (p.penalty_last_n < -1)
    fail("penalty_last_n must be >= -1 (-1 = whole history), got " +
         std::to_string(p.penalty_last_n));
  if (p.n_logprobs < 0 || p.n_logprobs > kMaxLogprobs)
    fail("n_logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
         std::to_string(p.n_logprobs));
  std::vector<int32_t> ids;
  ids.reserve(p.logit_bias.size());
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) fail("logit_bias token id must be >= 0, got " + std::to_string(token));
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      fail("logit_bias for token " + std::to_string(token) + " must be finite or -inf, got " +
           show(bias));
    ids.push_back(token);
  }
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
    fail("logit_bias lists token " + std::to_string(*dup) + " more than once");
}

// The acceptance stream's seed: the request's seed moved by a fixed odd constant (as before the
// token draws became counter-based, so independent proposals keep their acceptance tests).
Sampler::Sampler(SamplingParams params)
    : params_(std::move(params)), accept_rng_(params_.seed ^ 0x9e3779b97f4a7c15ULL) {
  validate(params_);
}

// Checks the inputs and computes the penalized logits (penalized_); their log-sum-exp waits for lse().
void Sampler::prepare(std::span<const float> logits, std::span<const int32_t> history) {
  const size_t n_vocab = logits.size();
  if (n_vocab == 0) fail("empty logits");
  if (n_vocab > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("vocabulary of " + std::to_string(n_vocab) + " tokens exceeds int32 token ids");
  if (any_nan_or_pos_inf(logits))  // a fast scan, then the culprit for the message
    for (size_t i = 0; i < n_vocab; ++i)
      if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity())
        fail("logit of token " + std::to_string(i) + " is " + show(logits[i]) +
             " (NaN/+inf logits mean the model output is broken)");
  for (const auto& [token, bias] : params_.logit_bias)
    if (static_cast<size_t>(token) >= n_vocab)
      fail("logit_bias token " + std::to_string(token) + " is outside the vocabulary of " +
           std::to_string(n_vocab));
  const PenaltyParams pen = penalty_params(params_);
  const auto window = penalty_window(history, pen.last_n);
  if (penalties_active(pen))
    for (int32_t t : window)
      if (t < 0 || static_cast<size_t>(t) >= n_vocab)
        fail("history token " + std::to_string(t) + " is outside the vocabulary of " +
             std::to_string(n_vocab));

  penalized_.assign(logits.begin(), logits.end());
  apply_logit_bias(penalized_, params_.logit_bias);
  apply_penalties(penalized_, window, pen);

  // Bias/penalties on finite inputs stay finite unless they overflow; catch that too. (The
  // log-sum-exp is finite exactly when the maximum is: the sum of exp(l - max) is in [1, n].)
  const float max = penalized_max_ = max_value(penalized_);
  if (max == -std::numeric_limits<float>::infinity())
    fail("every token is banned (all logits are -inf after logit_bias)");
  if (max == std::numeric_limits<float>::infinity()) fail("logits overflowed to +inf after logit_bias/penalties");
  lse_ready_ = false;
}

// Only the tokens reported need the log-sum-exp: a verification pass prepares every row but
// reports the accepted ones, and an exp per vocabulary entry is not free (a double exp each cost
// as much as the demo model's whole output layer).
double Sampler::lse() const {
  if (!lse_ready_) {
    lse_ = log_sum_exp(penalized_, penalized_max_);
    lse_ready_ = true;
  }
  return lse_;
}

// The distribution of the prepared logits: the argmax alone for greedy, else the filtered
// candidates with weights exp((logit - max) / T), which draw() races as logit / T + Gumbel.
void Sampler::filtered(TokenDistribution& out) {
  out.ids.clear();
  out.weights.clear();
  if (params_.temperature == 0.0f) {
    out.ids.push_back(argmax(penalized_));
    out.weights.push_back(1.0);
    out.total = 1.0;
    out.greedy = true;
    return;
  }
  if (params_.top_k > 0) {
    top_k_candidates(penalized_, params_.top_k, cands_);
  } else {
    finite_candidates(penalized_, cands_);
  }
  keep_top_p(cands_, params_.top_p);
  keep_min_p(cands_, params_.min_p);
  // Candidates are listed in token-id order, whatever order the filters left them in (top-k
  // leaves rank order): the draw does not depend on the order, but the distribution a caller
  // sees (and the logprobs' ties) stay canonical.
  const auto by_id = [](const Candidate& a, const Candidate& b) { return a.id < b.id; };
  if (!std::is_sorted(cands_.begin(), cands_.end(), by_id)) std::sort(cands_.begin(), cands_.end(), by_id);
  double max = -std::numeric_limits<double>::infinity();
  for (const Candidate& c : cands_) max = std::max(max, static_cast<double>(c.logit));
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  out.total = 0.0;
  out.greedy = false;
  for (const Candidate& c : cands_) {
    out.ids.push_back(c.id);
    out.weights.push_back(std::exp((static_cast<double>(c.logit) - max) * inv_t));
    out.total += out.weights.back();
  }
}

SampleResult Sampler::report(int32_t token) const {
  SampleResult result;
  result.token = token;
  const double lse = this->lse();
  result.logprob = static_cast<float>(static_cast<double>(penalized_[static_cast<size_t>(token)]) - lse);
  for (const auto& c : best_n(penalized_, static_cast<size_t>(params_.n_logprobs)))
    result.top.push_back({c.id, static_cast<float>(static_cast<double>(c.logit) - lse)});
  return result;
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  prepare(logits, history);
  filtered(dist_);
  return report(sample_from(dist_));
}

TokenDistribution Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) {
  prepare(logits, history);
  TokenDistribution d;
  filtered(d);
  return d;
}

int32_t Sampler::sample_from(const TokenDistribution& d) {
  if (d.ids.empty() || !(d.total > 0)) fail("cannot sample from an empty distribution");
  const int32_t token = draw(d, next_draw());
  ++step_;
  return token;
}

double Sampler::accept_uniform() { return accept_rng_.next_unit(); }

SampleResult Sampler::report(std::span<const float> logits, std::span<const int32_t> history, int32_t token) {
  prepare(logits, history);
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) fail("token " + std::to_string(token) + " is outside the vocabulary");
  return report(token);
}

}  // namespace peregrine
