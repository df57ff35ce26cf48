#pragma once
// Token sampling: turns one row of logits into the next token, deterministically for a seed.
//
// Pipeline (the order of llama.cpp's common sampler), applied to a private copy of the logits:
//   1. logit_bias    add each bias to its token's logit (-inf bans a token).
//   2. penalties     over the last `penalty_last_n` tokens of `history` (-1 = all, 0 = none),
//                    each distinct token with count c > 0 gets
//                      repetition (CTRL / llama.cpp): logit > 0 ? logit / r : logit * r
//                      then OpenAI:                   logit -= c * frequency + presence
//   -> the result is the "penalized distribution" p = softmax(penalized logits); the reported
//      logprobs are computed from it (see SampleResult).
//   3. temperature == 0: greedy, argmax of the penalized logits (ties -> lowest id); the filters
//      below could not change the argmax, and no random number is consumed.
//   4. top_k         keep the k highest logits (ties -> lower id); 0 = off.
//   5. top_p         keep the shortest prefix (by rank) whose mass under softmax of the surviving
//                    logits, temperature-free, reaches top_p; 1 = off.
//   6. min_p         keep tokens with p >= min_p * p_max (temperature-free); 0 = off.
//   7. temperature   divide the surviving logits by T (filters see T-free probabilities, as in
//                    llama.cpp where temperature runs last).
//   8. draw by the Gumbel-max trick: the kept candidate maximizing logit / T + g, with g Gumbel
//      noise that is a pure function of (seed, draw step, token id) (sampling/distribution.h
//      draw(), sampling/rng.h draw_bits). Exactly a sample of softmax(kept logits / T).
//
// Conventions:
//   * Determinism: the n-th non-greedy draw of a Sampler (step n, counted from 0) uses the noise
//     of (seed, n) whatever the filters kept and whatever the logits were; the noise of a token
//     depends on its id alone, never on which other tokens are candidates. So a speculative
//     proposer drawing from its own distribution with the noise of the step the target will draw
//     that position at agrees with the target's draw as often as the two distributions allow
//     (engine/verifier.h). No <random> distributions are used, so a seed yields the same tokens
//     on every platform (up to libm's exp()/log() rounding, which could only matter for a draw
//     whose two best candidates are within ~1e-16 of each other).
//   * Logits: NaN and +inf are rejected with UsageError (they signal a broken model, and no
//     ordering of them is meaningful); -inf is allowed and means "never sample this token".
//     If every token ends up at -inf, sample() throws UsageError.
//   * Ranking never sorts the whole vocabulary: top-k keeps a small buffer of tokens above a
//     running threshold in one pass, then nth_element on it; top-p selects by probability mass
//     (quickselect), logprobs keep a small sorted list.
//   * Each Sampler owns its RNG state: use one per request. Not thread-safe; distinct Samplers
//     may be used from different threads.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampling/distribution.h"
#include "sampling/filters.h"
#include "sampling/rng.h"

namespace peregrine {

struct SamplingParams {
  float temperature = 1.0f;         // >= 0; 0 -> greedy (argmax; ties -> lowest id)
  int32_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // > 0; llama.cpp/CTRL rule: logit>0 ? logit/pen : logit*pen
  float frequency_penalty = 0.0f;   // finite; OpenAI: logit -= count * freq_pen
  float presence_penalty = 0.0f;    // finite; OpenAI: logit -= (count>0) * pres_pen
  int32_t penalty_last_n = 64;      // >= -1; window of recent tokens (-1 = all, 0 = none)
  uint64_t seed = 0;
  int32_t n_logprobs = 0;           // 0..20: top-N alternatives to report
  // token id -> added to its logit. Ids must be >= 0 and unique; a bias is finite or -inf
  // (ban). Ids >= n_vocab are reported by sample(), which is the first place n_vocab is known.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token;
  // log-softmax of the chosen token under the penalized distribution (after logit_bias and
  // penalties, before top-k/top-p/min-p and temperature), over the whole vocabulary. This is
  // what OpenAI reports and what vLLM calls "processed logprobs" minus temperature: it does not
  // move when the user changes temperature or filters, so logprobs stay comparable.
  float logprob;
  // The n_logprobs most likely tokens under that same distribution, descending (ties -> lower
  // id); may include the chosen token. Tokens at -inf (banned) are never listed, so this can
  // be shorter than n_logprobs.
  std::vector<TokenLogprob> top;
};

// Throws UsageError("sampling: ...") naming the first invalid field.
void validate(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);  // validates -> UsageError

  // logits: [n_vocab] raw model output for the next token. history: [n_tokens] all tokens of the
  // sequence so far (prompt + generated), each in [0, n_vocab); only the penalty window is read
  // (and checked). Throws UsageError for empty/non-finite logits, out-of-range ids, or when no
  // token can be sampled.
  // The same as sample_from(distribution(logits, history)), reported as report() would.
  SampleResult sample(std::span<const float> logits, std::span<const int32_t> history);

  // The distribution sample() draws from for these logits (steps 1-7 above): the argmax alone
  // (greedy: true) at temperature 0, else the candidates the filters keep with weights
  // exp((logit - max) / T). Consumes no randomness. Same errors as sample().
  TokenDistribution distribution(std::span<const float> logits, std::span<const int32_t> history);
  // Draws a token from `d` (any distribution, e.g. a speculative residual) with the noise of this
  // sampler's next step: draw(d, next_draw()), then the step advances (by one for every call,
  // greedy d included, so the step is the count of tokens drawn). Throws UsageError for an empty
  // distribution.
  int32_t sample_from(const TokenDistribution& d);
  // The key of the next draw: the draw k calls from now has step next_draw().step + k. Coupled
  // speculative proposals draw position k with it (engine/proposer.h).
  DrawKey next_draw() const { return {params_.seed, step_}; }
  // One uniform draw in [0, 1) from the sampler's stream generator (seeded from the same seed),
  // kept for the acceptance tests of independently drawn speculative proposals; the draws that
  // choose tokens never read it.
  double accept_uniform();
  // What sample() would report had it chosen `token` from these logits (logprob, top-N).
  SampleResult report(std::span<const float> logits, std::span<const int32_t> history, int32_t token);
  // The same for the logits of the last distribution() call (no second pass over the vocabulary).
  SampleResult report(int32_t token) const;

  const SamplingParams& params() const { return params_; }

 private:
  void prepare(std::span<const float> logits, std::span<const int32_t> history);
  void filtered(TokenDistribution& out);

  SamplingParams params_;
  uint64_t step_ = 0;  // token draws so far
  Rng accept_rng_;
  std::vector<float> penalized_;    // [n_vocab] scratch: logits after bias and penalties
  float penalized_max_ = 0;         // their largest
  double lse() const;               // log-sum-exp of penalized_, computed on first use
  mutable double lse_ = 0;
  mutable bool lse_ready_ = false;
  std::vector<Candidate> cands_;    // scratch, reused between calls
  TokenDistribution dist_;          // scratch for sample()
};

}  // namespace peregrine
