#pragma once
// Speculative decoding's proposers: something cheap that guesses the next few tokens of a
// decoding sequence, so the target model can check several tokens in one pass (one weight read)
// instead of producing one. The engine verifies every guess with the exact rule (verifier.h), so
// a proposer changes only speed, never what is generated.
//
// A new proposer is one class implementing this interface (one file) and one entry in
// engine/proposer_registry.cpp (its name, what it needs, its factory), which the flags read; the
// engine takes it in EngineConfig::proposer.
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/sequence.h"

namespace peregrine {

// What a model-based proposer (draft model, prediction heads) proposes for a sequence that
// samples (temperature > 0); greedy sequences get the argmax either way. Both are verified in the
// coupled form, so the text is plain sampling's either way: only the acceptance differs.
enum class SampledProposals {
  // The token its filtered distribution q gives under the noise the sequence's sampler will draw
  // that position with: accepted with P(draw(p, key) == draw(q, key)) (coupled_agreement), 1 when
  // q == p.
  Coupled,
  // Its most likely token under the request's filters: accepted with p(argmax q). Better where q
  // is far from p (the heads' default); for a draft model, kept to measure against.
  Argmax,
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;

  // For each sequence (decoding: its committed tokens all computed but the last), sets
  // seq->draft to at most `max_tokens[i]` proposed tokens and seq->draft_q to the distribution
  // each was drawn from, under the sequence's own sampling filters (TokenDistribution::one_hot
  // for a deterministic guess). Fewer tokens, or none, is always allowed. A proposer that draws
  // with randomness of its own sets seq->draft_kind = DraftKind::Independent; one that draws
  // draft token j with the noise of the sequence sampler's draw j steps ahead
  // (seq->sampler.next_draw(), step + j) leaves it Coupled (verifier.h).
  virtual void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) = 0;

  // The sequence's committed tokens changed (tokens accepted, a rollback, a preemption):
  // proposers that keep state per sequence (a draft model's KV cache) resynchronize here.
  // target_hidden: the target's final hidden state ([dim], after the final norm) of the row whose
  // logits gave the last committed token, for proposers that read it (prediction heads); empty
  // when there is none (a preemption).
  virtual void on_commit(const Sequence& seq, std::span<const float> target_hidden) {}
  // The sequence ended; release whatever is kept for it.
  virtual void on_finish(const Sequence& seq) {}

  // Model passes the proposer has run so far (draft-model forward calls; 0 for a lookup).
  virtual int64_t passes() const { return 0; }
};

}  // namespace peregrine
