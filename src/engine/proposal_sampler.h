#pragma once
// How a model-based proposer (draft model, prediction heads) turns its logits for a sequence's
// next draft positions into proposals, one position at a time: the request's own filters
// (temperature, top-k/p, min-p, penalties over the committed tokens and the drafts before,
// logit bias) give the proposer's distribution q, and the token is draw(q, key) with the noise
// key the sequence's sampler will draw that position's token with (SampledProposals::Coupled), or
// q's most likely token (Argmax). The verifier's target then draws with the same key
// (verifier.h), so a proposer whose q is near the target's p is accepted coupled_agreement(p, q)
// of the time (1 when q == p), and the text stays plain sampling's.
#include <span>
#include <vector>

#include "engine/proposer.h"
#include "engine/sequence.h"
#include "sampling/sampler.h"

namespace peregrine {

class ProposalSampler {
 public:
  // Starts at the sequence's first draft position (its draft should be empty). `seq` must
  // outlive this object.
  ProposalSampler(Sequence& seq, SampledProposals mode);

  // logits: [n_vocab], the proposer's prediction for the next draft position. Appends the
  // proposal to seq.draft and q to seq.draft_q; returns the token.
  TokenId next(std::span<const float> logits);

 private:
  Sequence* seq_;
  Sampler filters_;               // the request's filters (greedy for Argmax); its own generator is unused
  DrawKey ahead_;                 // the key of the next draft position's draw (step + j for position j)
  std::vector<TokenId> history_;  // committed tokens and the drafts so far (penalties read them)
};

}  // namespace peregrine
