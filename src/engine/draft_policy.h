#pragma once
// Which decoding sequences propose drafts this step and how many tokens each (the Scheduler owns
// it; the engine runs the proposer on its choice). Per sequence: it decodes, allows speculation
// (Request::speculate), is not backing off after a miss (Sequence::spec_skip), and has room
// under its max_tokens and the context; per step: no drafts at all with more than max_batch
// sequences decoding (verification stops paying once decode is compute-bound), else K drafts
// chosen as below.
//
// K from what this machine measured:
// speculation pays only while verifying K more rows costs less than the tokens it is expected to
// add. Where decode is memory-bound, K + 1 rows cost about one row (the weights are read once
// either way); where the weights sit in cache or the batch is large, each row costs compute, and
// the same proposals make decoding slower (docs/performance-history.md, "Speculative decoding").
//
// Model, refreshed every step:
//   acceptance: alpha, the chance a proposed token is accepted given the ones before it were,
//     counted over recent verifications (accepted tokens vs the first rejection);
//   expected tokens per speculating sequence with K proposals: 1 + alpha + ... + alpha^K;
//   step time with R decode rows: measured on steps without prompt tokens (a low envelope per R,
//     so steps stalled by other load do not count), interpolated between the R seen;
//   proposer time: proposer_ms per proposed position (a draft model's pass; ~0 for a lookup).
// The K in [0, max_k] with the most expected tokens per millisecond wins; 0 turns speculation off
// for the step. Every proposer in peregrine makes coupled proposals (verifier.h), so the text never
// depends on K: adapting K to timings changes speed only.
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "engine/sequence.h"

namespace peregrine {

struct DraftPolicyConfig {
  int64_t max_k = 4;       // drafts per sequence and step (EngineConfig::spec_tokens)
  int64_t max_batch = 8;   // more decoding sequences than this: no drafts (EngineConfig::spec_max_batch)
  bool adaptive = true;    // K from measurements (choose_k); false: always max_k
};

// This step's proposals: seqs[i] proposes up to max_tokens[i] tokens.
struct DraftChoice {
  std::vector<Sequence*> seqs;
  std::vector<int64_t> max_tokens;
  int64_t k = 0;  // the step's K, for observe_proposer
  bool empty() const { return seqs.empty(); }
};

class DraftPolicy {
 public:
  explicit DraftPolicy(int64_t max_k) : DraftPolicy(DraftPolicyConfig{max_k}) {}
  explicit DraftPolicy(DraftPolicyConfig config);

  // Clears the drafts of every running sequence not in flight (its drafts are being verified)
  // and chooses this step's proposals; valid until the next call.
  const DraftChoice& choose(std::span<Sequence* const> running, int64_t context_length);
  // A verification of `proposed` drafts of `s` accepted the first `accepted`: the acceptance, and
  // the sequence's backoff (a miss costs a wider pass for one token: it sits out the next
  // spec_backoff steps, doubling up to 16 while misses continue, reset by any accepted draft).
  void observe_verification(Sequence& s, int64_t proposed, int64_t accepted);

  // A verification of `proposed` tokens accepted the first `accepted`.
  void observe_verification(int64_t proposed, int64_t accepted);
  // A step without prompt tokens ran `decode_rows` rows (drafts included) in `ms`.
  void observe_decode_step(int64_t decode_rows, double ms);
  // The proposer proposed up to `k` tokens for each sequence in `ms`.
  void observe_proposer(int64_t k, double ms);

  // K for this step: `plain_rows` decoding sequences that will not speculate, `spec_seqs` that
  // may. max_k until the measurements are in; then the best K, with a probe every 32 steps while
  // that is below max_k (K = max_k; while it is 0, K = max_k and K = 1 in turn, every 8 steps
  // when proposing is nearly free), so the largest pass's cost and the acceptance stay current.
  int64_t choose_k(int64_t plain_rows, int64_t spec_seqs);

  // The fit, for reports and tests; ready() once enough varied steps were seen.
  bool ready() const;
  double acceptance() const;
  double fixed_ms() const;
  double row_ms() const;
  double predict_ms(int64_t decode_rows) const;  // a step of that many decode rows
  double proposer_ms() const { return proposer_ms_; }
  // Expected tokens per ms with K proposals for `spec_seqs` of the rows (the quantity maximized).
  double tokens_per_ms(int64_t k, int64_t plain_rows, int64_t spec_seqs) const;

 private:
  DraftPolicyConfig config_;
  int64_t max_k_;
  DraftChoice choice_;
  // Acceptance counts, decayed: accepted tokens and rejections.
  double accepted_ = 0, rejected_ = 0;
  std::map<int64_t, double> step_ms_;  // decode rows -> a low envelope of the step's ms
  int64_t decode_steps_ = 0;           // observed
  int64_t seen_steps_ = 0;             // all
  double proposer_ms_ = 0;
  bool proposer_seen_ = false;
  int64_t steps_since_probe_ = 0;  // choose_k calls below max_k since the last probe
  bool probe_largest_ = false;     // the last probe was K = max_k
};

}  // namespace peregrine
