#pragma once
// Speculation with a small draft model of the same vocabulary: for every decoding sequence, the
// draft catches up on the sequence's committed tokens in its own paged KV cache, then proposes
// its next tokens one at a time, all sequences together in batched draft passes. A sampling
// sequence's proposal for draft position j is what the draft's distribution under the request's
// own filters gives under the noise the target will draw position j with (ProposalSampler), a
// greedy sequence's is the draft's argmax; the verifier checks them in the coupled form, so a seed
// gives the same text as without speculation.
//
// The draft shares the target's execution context (the same threads, taking turns). Its cache is
// separate: positions it computed for drafts that were rejected are dropped on the next proposal
// (only the prefix it shares with the committed tokens is kept).
#include <cstdint>
#include <map>
#include <vector>

#include "engine/proposer.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace peregrine {

// Throws UsageError naming the difference when the two files' vocabularies are not the same
// (size, or a token's text), since a draft's token ids must mean the target's.
void check_same_vocabulary(const ModelFile& target, const ModelFile& draft);

class DraftModelProposer final : public Proposer {
 public:
  // kv_tokens: the draft cache's capacity in tokens (a sequence that finds no room, or runs past
  // the draft's context, gets no proposal). mode: what sampling sequences are proposed.
  DraftModelProposer(Model draft, int64_t kv_tokens, SampledProposals mode = SampledProposals::Coupled);
  const Model& draft() const { return draft_; }

  std::string_view name() const override { return "draft"; }
  void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) override;
  void on_finish(const Sequence& seq) override;

  int64_t passes() const override { return draft_passes_; }

 private:
  struct State {
    std::vector<TokenId> cached;  // the tokens whose K/V the draft cache holds, in order
  };
  // Keeps the longest prefix of the sequence's cached tokens that its committed tokens share.
  void resync(const Sequence& seq, State& st);
  struct Pending;
  bool step(std::vector<Pending>& pending);

  Model draft_;
  SampledProposals mode_;
  KvCache kv_;
  std::map<SeqId, State> states_;
  Batch batch_;
  std::vector<float> logits_;
  int64_t draft_passes_ = 0;
};

}  // namespace peregrine
