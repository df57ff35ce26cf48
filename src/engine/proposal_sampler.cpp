#include "engine/proposal_sampler.h"

namespace peregrine {
namespace {

SamplingParams proposal_params(const SamplingParams& request, SampledProposals mode) {
  SamplingParams p = request;
  p.n_logprobs = 0;
  if (mode == SampledProposals::Argmax) p.temperature = 0;  // the argmax under the request's bias and penalties
  return p;
}

}  // namespace

ProposalSampler::ProposalSampler(Sequence& seq, SampledProposals mode)
    : seq_(&seq),
      filters_(proposal_params(seq.request.sampling, mode)),
      ahead_(seq.sampler.next_draw()),
      history_(seq.tokens) {}

TokenId ProposalSampler::next(std::span<const float> logits) {
  TokenDistribution q = filters_.distribution(logits, history_);
  // Position j's step is passed whether or not q needs noise (a greedy q does not), so the next
  // position gets step j + 1 as the verifier's draws will.
  const TokenId t = draw(q, ahead_);
  ++ahead_.step;
  seq_->draft.push_back(t);
  seq_->draft_q.push_back(std::move(q));
  history_.push_back(t);
  return t;
}

}  // namespace peregrine
