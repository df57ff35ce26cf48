#pragma once
// The individual steps of the sampling pipeline (see sampler.h for the order and conventions),
// exposed as free functions so each can be tested on hand-built inputs.
//
// Candidate lists are kept in one of two deterministic orders: token-id order (as built from the
// logits) or "rank order" (logit descending, ties by lower id) once a step has had to rank them.
// The rank comparator is a strict total order, so nth_element/partial_sort give the same result
// with every standard library.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace peregrine {

struct Candidate {
  int32_t id;
  float logit;
};

// Strict total order: higher logit first, then lower id.
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// logits: [n_vocab]. Adds each bias to its token's logit. Tokens must be < n_vocab (checked by
// the caller).
void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias);

struct PenaltyParams {
  float repetition = 1.0f;  // CTRL / llama.cpp: logit > 0 ? logit / r : logit * r
  float frequency = 0.0f;   // OpenAI: logit -= count * frequency
  float presence = 0.0f;    // OpenAI: logit -= (count > 0) * presence
  int32_t last_n = 64;      // window of the most recent tokens; -1 = whole history, 0 = off
};
bool penalties_active(const PenaltyParams& p);

// logits: [n_vocab]; history: [n_tokens], each in [0, n_vocab) (checked by the caller).
// Each distinct token of the window is penalized once, repetition first, then
// frequency/presence (llama.cpp's order), so the result does not depend on window order.
void apply_penalties(std::span<float> logits, std::span<const int32_t> window,
                     const PenaltyParams& p);

// The window of `history` the penalties look at.
std::span<const int32_t> penalty_window(std::span<const int32_t> history, int32_t last_n);

// Index of the largest logit; ties go to the lowest index. logits must be non-empty.
int32_t argmax(std::span<const float> logits);

// Replaces `out` with all tokens whose logit is not -inf, in id order (reuses its storage).
void finite_candidates(std::span<const float> logits, std::vector<Candidate>& out);

// Replaces `out` with the k best tokens (k >= 1; fewer when fewer are finite), in rank order,
// without ranking the whole vocabulary. logits: [n_vocab], no NaN.
void top_k_candidates(std::span<const float> logits, int32_t k, std::vector<Candidate>& out);

// The largest of x (-inf when empty). x: no NaN.
float max_value(std::span<const float> x);
// Whether some element is NaN or +inf.
bool any_nan_or_pos_inf(std::span<const float> x);

// Nucleus filter on softmax(logits) over the current candidates (temperature-free, as
// llama.cpp applies it before temperature): keeps the shortest rank-order prefix whose
// probability mass reaches top_p (the token that crosses is kept; at least one survives).
// Keeps the input order. Finds the nucleus by quickselect on probability mass (expected O(V),
// no sort); input already in rank order (after top-k) is simply walked.
// top_p in (0, 1]; 1 keeps everything.
void keep_top_p(std::vector<Candidate>& cands, float top_p);

// Keeps candidates with p >= min_p * p_max, i.e. logit >= max_logit + log(min_p). Keeps order.
// min_p in [0, 1]; 0 keeps everything.
void keep_min_p(std::vector<Candidate>& cands, float min_p);

// Draws from softmax(logit / temperature) over cands (temperature > 0, cands non-empty) with
// `unit` uniform in [0, 1): walks the cumulative distribution in the list's order (computed in
// double) and returns the index into cands. Rounding can leave the total slightly below unit;
// then the last candidate with non-zero probability is chosen.
size_t draw_index(std::span<const Candidate> cands, float temperature, double unit);
// Same, with caller-owned scratch for the weights (no allocation once it has grown).
size_t draw_index(std::span<const Candidate> cands, float temperature, double unit,
                  std::vector<double>& weights);

// log(sum(exp(logits))) over all finite logits: exp(l - max) in float, summed in double. -inf if
// there are none.
double log_sum_exp(std::span<const float> logits);
// The same when the caller already has max = max_value(logits) (one pass fewer).
double log_sum_exp(std::span<const float> logits, float max);

// The n best tokens by logit (rank order, -inf excluded), for reporting logprobs.
std::vector<Candidate> best_n(std::span<const float> logits, size_t n);

}  // namespace peregrine
