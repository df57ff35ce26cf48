#pragma once
// The engine's state of one request: its tokens, how much of them the KV cache holds (n_computed:
// the one record of it; the KV cache and the runners keep no length of their own), its phase, its
// own sampler and its output-side state (detokenizer, held-back text for stop strings).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/verifier.h"
#include "grammar/matcher.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

// Where a sequence is. Waiting: queued (new, or preempted: its K/V gone). Prefill: admitted, its
// prompt (or a recomputation after preemption) running in chunks until a step with its logits
// lands. Decode: one committed token (and its drafts) per step. Finished: left the scheduler.
// Disaggregated prefill/decode runs Prefill sequences in the prefill pool, Decode ones in the
// decode pool.
enum class SeqPhase { Waiting, Prefill, Decode, Finished };

struct Sequence {
  Sequence(RequestId id_, Request request_, uint64_t arrival_)
      : id(id_), request(std::move(request_)), arrival(arrival_), sampler(request.sampling),
        tokens(request.prompt) {}

  RequestId id;
  Request request;
  uint64_t arrival;              // submission order: FCFS tie-break and "newest" for preemption
  Sampler sampler;               // kept across preemption: a recomputed request draws on where it left off
  std::vector<TokenId> tokens;   // [prompt + generated]: committed tokens
  int64_t n_computed = 0;        // leading tokens whose K/V is in the cache
  // Speculation: tokens a proposer drafted to follow `tokens`, the distribution each was drawn
  // from (q), and how (verifier.h: Coupled unless a proposer drew them with randomness of its
  // own). The next step verifies them; they never count as committed.
  std::vector<TokenId> draft;
  std::vector<TokenDistribution> draft_q;
  DraftKind draft_kind = DraftKind::Coupled;
  // A verification that accepted nothing cost a wider pass for one token: after one, the
  // sequence sits out the next spec_backoff steps (doubling up to 16 while misses continue,
  // reset by any accepted proposal), so a proposer that cannot guess this text stops costing.
  int32_t spec_backoff = 0;
  int32_t spec_skip = 0;
  int64_t n_preemptions = 0;
  SeqPhase phase = SeqPhase::Waiting;
  // In a step that a pipelined runner has not returned yet: not scheduled, preempted or ended
  // until it lands.
  bool in_flight = false;

  // Constrained decoding (request.grammar): the grammar's state after the committed tokens.
  std::optional<GrammarMatcher> grammar;
  bool grammar_strips_space = false;  // the first generated token loses a leading space (SPM text start)
  bool grammar_done = false;          // complete, and nothing may follow: the request ends here

  // Output side (engine_core): streamed text not yet delivered because a stop string might start
  // in it.
  std::optional<StreamDecoder> detok;
  std::string held_text;

  int64_t prompt_len() const { return static_cast<int64_t>(request.prompt.size()); }
  int64_t n_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len(); }
  // Committed tokens without K/V: 1 when decoding, more for a prompt (or a recomputation).
  int64_t n_to_compute() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
  bool running() const { return phase == SeqPhase::Prefill || phase == SeqPhase::Decode; }
  // Rows the next step runs for it: a prompt chunk's tokens, or the last token plus its drafts.
  int64_t n_to_schedule() const {
    return n_to_compute() + (phase == SeqPhase::Decode ? static_cast<int64_t>(draft.size()) : 0);
  }
  // The token at position p of committed tokens followed by the draft.
  TokenId token_at(int64_t p) const {
    const auto n = static_cast<int64_t>(tokens.size());
    return p < n ? tokens[static_cast<size_t>(p)] : draft[static_cast<size_t>(p - n)];
  }
  void clear_draft() {
    draft.clear();
    draft_q.clear();
    draft_kind = DraftKind::Coupled;
  }
  SeqId seq_id() const { return static_cast<SeqId>(id); }
};

}  // namespace peregrine
