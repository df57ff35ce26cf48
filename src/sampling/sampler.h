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
//   8. softmax + draw with one uniform double from the sampler's own xoshiro256** stream, by
//      inverse CDF over the kept candidates in token-id order.
//
// Conventions:
//   * Determinism: every non-greedy sample() consumes exactly one 64-bit draw, whatever the
//     filters kept, and candidates are walked in one canonical order, token id (also after a
//     ranking filter: a shared order lets speculative proposals drawn with the same uniform
//     agree with the draw, engine/verifier.h). No <random> distributions are
//     used, so a seed yields the same tokens on every platform (up to libm's exp() rounding,
//     which could only matter for a draw landing within ~1e-16 of a boundary).
//   * Logits: NaN and +inf are rejected with UsageError (they signal a broken model, and no
//     ordering of them is meaningful); -inf is allowed and means "never sample this token".
//     If every token ends up at -inf, sample() throws UsageError.
//   * Ranking never sorts the whole vocabulary: top-k uses nth_element, top-p selects by
//     probability mass (quickselect), logprobs keep a small sorted list.
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
  // Draws a token from `d` (any distribution, e.g. a speculative residual) with this sampler's
  // generator: one 64-bit draw, none when d.greedy. Throws UsageError for an empty distribution.
  int32_t sample_from(const TokenDistribution& d);
  // A copy of the generator that draws the tokens, in its current state: its next uniforms are the
  // ones the next non-greedy draws will use. Coupled speculative proposals read them ahead
  // (engine/proposer.h) without consuming them.
  Rng generator() const { return rng_; }
  // One uniform draw in [0, 1) from the sampler's second generator (seeded from the same seed),
  // kept for the acceptance tests of sampled speculative proposals, so those tests never shift
  // the draws that choose tokens.
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
  Rng rng_;
  Rng accept_rng_;
  std::vector<float> penalized_;    // [n_vocab] scratch: logits after bias and penalties
  double lse() const;               // log-sum-exp of penalized_, computed on first use
  mutable double lse_ = 0;
  mutable bool lse_ready_ = false;
  std::vector<Candidate> cands_;    // scratch, reused between calls
  TokenDistribution dist_;          // scratch for sample()
};

}  // namespace peregrine
