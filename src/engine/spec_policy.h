#pragma once
// How many tokens to propose per decoding sequence this step, from what this machine measured:
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

namespace peregrine {

class SpecPolicy {
 public:
  explicit SpecPolicy(int64_t max_k);

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
  int64_t max_k_;
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
