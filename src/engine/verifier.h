#pragma once
// Speculative decoding's accept/reject rule (Leviathan et al. / Chen et al.), which makes the
// generated tokens follow the target model's distribution exactly whatever the proposer guessed.
// For each proposed token x drawn from q, with the target's distribution p (after the request's
// own filters: temperature, top-k/p, min-p, penalties, logit bias):
//   accept x with probability min(1, p(x) / q(x)); at the first rejection, draw the replacement
//   from normalize(max(0, p - q)) and stop; if all are accepted, draw one more token from p.
//
// Coupled proposals (DraftKind::Coupled: what every proposer here makes) take the rule in its
// coupled form: the target draws its own token t from p exactly as plain sampling would, by the
// Gumbel-max trick with the noise of the request's next draw step (sampling/distribution.h draw),
// and x is accepted exactly when t == x. Every generated token takes one step of the request's
// sampler, as without speculation, so a seed gives the same text with speculation or without,
// however many proposals were made, cut short or wrong: exactness needs nothing of the proposer.
// What the proposer decides is how often t == x:
//   - a deterministic guess (one-hot q: n-gram lookup, an argmax): p(x). Here the coupled form is
//     the written rule itself: P(accept) = p(x) = min(1, p(x)/1), and after a rejection t is
//     distributed as p without x, renormalized, which is normalize(max(0, p - one_hot(x)));
//   - x = draw(q, key) with the key the target's draw of that position will use
//     (Sampler::next_draw, step + j for draft position j): P(draw(p, key) == draw(q, key)), the
//     Gumbel coupling's agreement (coupled_agreement), at most sum min(p, q), the written rule's
//     acceptance, and 1 when q == p. The noise of a token depends on its id alone, so the
//     agreement does not depend on how either side lists or filters its candidates.
// Independent proposals (DraftKind::Independent: x drawn from q with randomness of the
// proposer's own, not one-hot) use the rule as written, their acceptance tests drawing from a
// second generator (Sampler::accept_uniform): the distribution is exact, the text for a seed may
// differ from plain sampling's. (Coupled draws must never take this path: the replacement would
// reuse the noise the proposal was made with, and the output would no longer follow p.)
// Greedy requests (temperature 0) accept x exactly when it is the target's argmax.
#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "util/batch.h"

namespace peregrine {

// How a sequence's draft tokens were chosen, which decides the form of the rule that checks them.
enum class DraftKind {
  Coupled,      // deterministic, or drawn with the noise the sequence's own sampler will draw
  Independent,  // drawn from draft_q with randomness independent of the sequence's sampler
};

struct Verdict {
  std::vector<SampleResult> tokens;  // the accepted proposals, then the target's own token
  int64_t n_accepted = 0;            // proposals accepted (tokens.size() - 1)
};

// history: the committed tokens; draft: [k] proposals with draft_q: [k] their distributions;
// logits: [k + 1][n_vocab], row i the target's prediction after history + draft[0, i).
Verdict verify(Sampler& sampler, std::span<const TokenId> history, std::span<const TokenId> draft,
               std::span<const TokenDistribution> draft_q, DraftKind kind, std::span<const float> logits,
               int64_t n_vocab);

}  // namespace peregrine
