#include "engine/draft_policy.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace peregrine {
namespace {

constexpr double kDecay = 0.97;         // weight of an observation n steps old: kDecay^n
constexpr int64_t kMinDecodeSteps = 8;  // decode steps before the row cost is trusted
constexpr int64_t kProbeEvery = 32;     // below the largest K, probe once per this many steps
// While speculation is off and proposing is nearly free (a lookup: its K proposals cost under
// kFreeProposer of a step), probe this often instead: such a probe costs only when the proposer
// has something to verify, and the acceptance it measures is what turns speculation back on once
// the text starts repeating (n-gram's first proposals, before a loop, are mostly rejected).
constexpr int64_t kProbeEveryFree = 8;
constexpr double kFreeProposer = 0.05;
constexpr int64_t kColdSteps = 4;       // first decode steps not observed

}  // namespace

DraftPolicy::DraftPolicy(DraftPolicyConfig config) : config_(config), max_k_(config.max_k) {}

const DraftChoice& DraftPolicy::choose(std::span<Sequence* const> running, int64_t context_length) {
  choice_.seqs.clear();
  choice_.max_tokens.clear();
  choice_.k = 0;
  int64_t decoding = 0;
  for (Sequence* s : running) {
    if (s->in_flight) continue;
    s->clear_draft();
    decoding += s->phase == SeqPhase::Decode ? 1 : 0;
  }
  if (decoding > config_.max_batch) return choice_;  // compute-bound: verification would not pay
  for (Sequence* s : running) {
    if (s->in_flight || !s->request.speculate || s->phase != SeqPhase::Decode) continue;
    if (s->spec_skip > 0) {
      --s->spec_skip;
      continue;
    }
    choice_.seqs.push_back(s);
  }
  const auto n_spec = static_cast<int64_t>(choice_.seqs.size());
  choice_.k = n_spec == 0 ? 0 : config_.adaptive ? choose_k(decoding - n_spec, n_spec) : config_.max_k;
  // As many as its max_tokens and the context allow (the scheduler may cut them further when the
  // step's token budget runs out).
  size_t kept = 0;
  for (Sequence* s : choice_.seqs) {
    const int64_t room = std::min(
        {choice_.k, s->request.max_tokens - s->n_generated() - 1, context_length - static_cast<int64_t>(s->tokens.size()) - 1});
    if (room < 1) continue;
    choice_.seqs[kept++] = s;
    choice_.max_tokens.push_back(room);
  }
  choice_.seqs.resize(kept);
  return choice_;
}

void DraftPolicy::observe_verification(Sequence& s, int64_t proposed, int64_t accepted) {
  observe_verification(proposed, accepted);
  s.spec_backoff = accepted > 0 ? 0 : std::min(16, std::max(1, 2 * s.spec_backoff));
  s.spec_skip = s.spec_backoff;
}

void DraftPolicy::observe_verification(int64_t proposed, int64_t accepted) {
  if (proposed <= 0) return;
  accepted_ = accepted_ * kDecay + static_cast<double>(accepted);
  rejected_ = rejected_ * kDecay + (accepted < proposed ? 1.0 : 0.0);
}

void DraftPolicy::observe_decode_step(int64_t decode_rows, double ms) {
  if (decode_rows <= 0 || !(ms >= 0) || !std::isfinite(ms)) return;
  // The first steps after a prompt run cold (page faults, caches, thread wake-ups).
  if (++seen_steps_ <= kColdSteps) return;
  ++decode_steps_;
  // A low envelope per row count: a faster step is believed at once (other load on the machine
  // and a cold first pass only ever slow a step down, so the fastest seen is the best estimate;
  // at half weight a cold first 5-row pass at 3.6 rows took four probes, 128 steps, to forget),
  // a slower one only slowly, so steps stalled by other load do not pass for the cost of rows.
  auto [it, fresh] = step_ms_.emplace(decode_rows, ms);
  if (!fresh) it->second = ms < it->second ? ms : it->second + 0.05 * (ms - it->second);
}

double DraftPolicy::predict_ms(int64_t rows) const {
  if (step_ms_.empty()) return 0;
  if (step_ms_.size() == 1) return step_ms_.begin()->second;
  // Interpolate between the row counts seen around `rows`; beyond them, extend the nearest two.
  auto hi = step_ms_.lower_bound(rows);
  if (hi != step_ms_.end() && hi->first == rows) return hi->second;
  if (hi == step_ms_.begin()) ++hi;
  if (hi == step_ms_.end()) --hi;
  auto lo = std::prev(hi);
  const double slope = std::max(0.0, (hi->second - lo->second) / static_cast<double>(hi->first - lo->first));
  return std::max(0.0, lo->second + slope * static_cast<double>(rows - lo->first));
}

void DraftPolicy::observe_proposer(int64_t k, double ms) {
  if (k <= 0 || !(ms >= 0) || !std::isfinite(ms)) return;
  const double per_position = ms / static_cast<double>(k);
  proposer_ms_ = proposer_seen_ ? 0.9 * proposer_ms_ + 0.1 * per_position : per_position;
  proposer_seen_ = true;
}

bool DraftPolicy::ready() const {
  // Two row counts at least, or the cost of a row is unknown.
  return decode_steps_ >= kMinDecodeSteps && step_ms_.size() >= 2 && accepted_ + rejected_ > 0 && proposer_seen_;
}

double DraftPolicy::acceptance() const {
  const double n = accepted_ + rejected_;
  return n > 0 ? accepted_ / n : 0;
}

// The line through the fewest and the most rows seen.
double DraftPolicy::row_ms() const {
  if (step_ms_.size() < 2) return 0;
  const auto& [x0, y0] = *step_ms_.begin();
  const auto& [x1, y1] = *step_ms_.rbegin();
  return std::max(0.0, (y1 - y0) / static_cast<double>(x1 - x0));
}

double DraftPolicy::fixed_ms() const {
  if (step_ms_.empty()) return 0;
  const auto& [x0, y0] = *step_ms_.begin();
  return std::max(0.0, y0 - row_ms() * static_cast<double>(x0));
}

double DraftPolicy::tokens_per_ms(int64_t k, int64_t plain_rows, int64_t spec_seqs) const {
  const double a = std::min(acceptance(), 0.999);
  const double expected = (1 - std::pow(a, static_cast<double>(k + 1))) / (1 - a);  // 1 + a + ... + a^k
  const double tokens = static_cast<double>(plain_rows) + static_cast<double>(spec_seqs) * expected;
  const double ms = predict_ms(plain_rows + spec_seqs * (k + 1)) + proposer_ms_ * static_cast<double>(k);
  return ms > 0 ? tokens / ms : 0;
}

int64_t DraftPolicy::choose_k(int64_t plain_rows, int64_t spec_seqs) {
  if (!ready()) return max_k_;  // explore: the measurements come from speculating
  int64_t best = 0;
  double best_rate = tokens_per_ms(0, plain_rows, spec_seqs);
  for (int64_t k = 1; k <= max_k_; ++k) {
    const double rate = tokens_per_ms(k, plain_rows, spec_seqs);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  // An estimate moves only when steps of its size run, so now and then probe what the choice
  // avoids: the largest K (its pass's cost, which a first measurement on a busy or cold machine may
  // have overstated for good) and, while speculation is off, K = 1 in turn (the acceptance).
  const bool free_proposer = proposer_ms_ * static_cast<double>(max_k_) < kFreeProposer * predict_ms(1);
  const int64_t every = best == 0 && free_proposer ? kProbeEveryFree : kProbeEvery;
  if (best == max_k_ || ++steps_since_probe_ < every) return best;
  steps_since_probe_ = 0;
  probe_largest_ = best > 0 || !probe_largest_;
  return probe_largest_ ? max_k_ : 1;
}

}  // namespace peregrine
