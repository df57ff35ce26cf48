#pragma once
// Speculative decoding's accept/reject rule (Leviathan et al. / Chen et al.), which makes the
// generated tokens follow the target model's distribution exactly whatever the proposer guessed:
// for each proposed token x, drawn by the proposer from q, with the target's distribution p
// (after the request's own filters: temperature, top-k/p, min-p, penalties, logit bias):
//   accept x with probability min(1, p(x) / q(x)); at the first rejection, draw the replacement
//   from normalize(max(0, p - q)) and stop; if all are accepted, draw one more token from p.
// Greedy requests (temperature 0) accept x exactly when it is the target's argmax, so their
// output is token for token the target's own.
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
// Uses `sampler`'s generator: one draw per proposal tested (none for greedy) and one for the
// final token.
Verdict verify(Sampler& sampler, std::span<const TokenId> history, std::span<const TokenId> draft,
               std::span<const TokenDistribution> draft_q, std::span<const float> logits, int64_t n_vocab);

}  // namespace peregrine
