#include "engine/verifier.h"

#include <algorithm>

#include "util/error.h"

namespace peregrine {
namespace {

bool one_hot(const TokenDistribution& q, TokenId x) { return q.ids.size() == 1 && q.ids.front() == x; }

}  // namespace

Verdict verify(Sampler& sampler, std::span<const TokenId> history, std::span<const TokenId> draft,
               std::span<const TokenDistribution> draft_q, DraftKind kind, std::span<const float> logits,
               int64_t n_vocab) {
  const auto k = static_cast<int64_t>(draft.size());
  if (static_cast<int64_t>(draft_q.size()) != k || static_cast<int64_t>(logits.size()) != (k + 1) * n_vocab) {
    throw UsageError("verify: " + std::to_string(k) + " proposals need as many distributions and " +
                     std::to_string(k + 1) + " logits rows");
  }
  Verdict v;
  std::vector<TokenId> hist(history.begin(), history.end());
  for (int64_t i = 0; i <= k; ++i) {
    const auto row = logits.subspan(static_cast<size_t>(i * n_vocab), static_cast<size_t>(n_vocab));
    const TokenDistribution p = sampler.distribution(row, hist);
    const bool proposed = i < k;
    const TokenId x = proposed ? draft[static_cast<size_t>(i)] : -1;
    const TokenDistribution* q = proposed ? &draft_q[static_cast<size_t>(i)] : nullptr;
    if (proposed && kind == DraftKind::Independent && !p.greedy && !one_hot(*q, x)) {
      // An independently sampled proposal: the rule as written.
      const double qx = q->prob(x);
      if (qx > 0 && sampler.accept_uniform() < std::min(1.0, p.prob(x) / qx)) {
        v.tokens.push_back(sampler.report(x));
        ++v.n_accepted;
        hist.push_back(x);
        continue;
      }
      const TokenDistribution r = residual(p, *q);
      v.tokens.push_back(sampler.report(sampler.sample_from(r.total > 0 ? r : p)));
      return v;
    }
    // The target's own draw (plain sampling's), accepted as the proposal when they agree.
    const TokenId t = sampler.sample_from(p);
    v.tokens.push_back(sampler.report(t));
    if (!proposed || t != x) return v;
    ++v.n_accepted;
    hist.push_back(t);
  }
  return v;
}

}  // namespace peregrine
