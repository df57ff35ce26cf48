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
      ahead_(seq.sampler.generator()),
      history_(seq.tokens) {}

TokenId ProposalSampler::next(std::span<const float> logits) {
  TokenDistribution q = filters_.distribution(logits, history_);
  // Position j's uniform is taken whether or not q needs it (a greedy q does not), so the next
  // position gets uniform j + 1 as the verifier's draws will.
  const TokenId t = draw(q, ahead_.next_unit());
  seq_->draft.push_back(t);
  seq_->draft_q.push_back(std::move(q));
  history_.push_back(t);
  return t;
}

}  // namespace peregrine
