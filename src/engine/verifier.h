#pragma once
// Speculative decoding's accept/reject rule (Leviathan et al. / Chen et al.), which makes the
// generated tokens follow the target model's distribution exactly whatever the proposer guessed.
// For each proposed token x drawn from q, with the target's distribution p (after the request's
// own filters: temperature, top-k/p, min-p, penalties, logit bias):
//   accept x with probability min(1, p(x) / q(x)); at the first rejection, draw the replacement
//   from normalize(max(0, p - q)) and stop; if all are accepted, draw one more token from p.
//
// Deterministic proposals (q one-hot, as n-gram lookup, argmax heads and a greedy draft model
// give) take the rule in its coupled form: the target draws its own token t from p with the very
// draw plain sampling would use, and x is accepted exactly when t == x. Then P(accept) = p(x) =
// min(1, p(x)/1), and after a rejection t is distributed as p without x, renormalized, which is
// normalize(max(0, p - one_hot(x))): the same rule. The gain is determinism: every generated
// token consumes one draw of the request's generator, as without speculation, so a seed gives the
// same text with speculation or without, however many proposals were made or cut short.
// Sampled proposals (q not one-hot) use the rule as written, their acceptance tests drawing from
// a second generator (Sampler::accept_uniform): the distribution is exact, the text for a seed
// may differ from plain sampling's.
// Greedy requests (temperature 0) accept x exactly when it is the target's argmax.
#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "util/batch.h"

namespace peregrine {

struct Verdict {
  std::vector<SampleResult> tokens;  // the accepted proposals, then the target's own token
  int64_t n_accepted = 0;            // proposals accepted (tokens.size() - 1)
};

// history: the committed tokens; draft: [k] proposals with draft_q: [k] their distributions;
// logits: [k + 1][n_vocab], row i the target's prediction after history + draft[0, i).
Verdict verify(Sampler& sampler, std::span<const TokenId> history, std::span<const TokenId> draft,
               std::span<const TokenDistribution> draft_q, std::span<const float> logits, int64_t n_vocab);

}  // namespace peregrine
