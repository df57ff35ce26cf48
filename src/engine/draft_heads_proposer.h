#pragma once
// Speculation with prediction heads trained for the target (Medusa): head i maps the target's
// final hidden state h at the last committed token to a guess of the token i + 1 places after
// the next one, through a residual SiLU layer and the target's own output matrix:
//   logits_i = W_out (h + SiLU(W_i h + b_i)).
// The target's pass that produced the last committed token also gives h (Proposer::on_commit),
// so proposing costs K small matrices and one pass over W_out for every sequence together, and no
// second model. Head i's logits give draft position i's proposal through ProposalSampler, by
// default each head's argmax under the request's filters (SampledProposals::Argmax): the heads'
// distributions are far from the target's (sum min(p, q) ~ 0.29 for head 0 at temperature 0.8),
// and a coupled draw agrees with the target's less often than the argmax does (0.17 against 0.19
// with run's filters, 0.13 against 0.17 without; bench/spec_acceptance, docs/performance-history.md).
//
// The heads file (GGUF, general.architecture = "medusa"; models/README.md): medusa.head_count,
// medusa.embedding_length (the target's dim), medusa.vocab_size (the target's), tensors
// medusa.{i}.weight {dim, dim} and medusa.{i}.bias {dim}.
#include <cstdint>
#include <map>
#include <vector>

#include "engine/proposer.h"
#include "model/model.h"

namespace peregrine {

class DraftHeadsProposer final : public Proposer {
 public:
  // `target` (whose output matrix and context the heads use) must outlive the proposer. Throws
  // FormatError for a file that is not a heads file, UsageError for heads of another shape.
  // mode: what sampling sequences are proposed.
  DraftHeadsProposer(ModelFile heads, const Model& target, SampledProposals mode = SampledProposals::Argmax);

  std::string_view name() const override { return "heads"; }
  int64_t n_heads() const { return static_cast<int64_t>(heads_.size()); }
  void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) override;
  void on_commit(const Sequence& seq, std::span<const float> target_hidden) override;
  void on_finish(const Sequence& seq) override;
  int64_t passes() const override { return passes_; }

 private:
  struct Head {
    TensorView weight;          // {dim, dim}
    std::vector<float> bias;    // [dim]
  };
  ModelFile file_;
  const Model& target_;
  SampledProposals mode_;
  std::vector<Head> heads_;
  std::map<SeqId, std::vector<float>> hidden_;  // [dim] per sequence: h at its last committed token
  std::vector<float> h_host_, logits_host_;     // [b][dim] the sequences' h; [rows][n_vocab] to sample from
  Buffer h_, z_, y_, logits_;                   // the context's scratch: [b][dim], [rows][dim], [rows][n_vocab]
  int64_t passes_ = 0;
};

}  // namespace peregrine
