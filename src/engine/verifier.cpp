#include "engine/verifier.h"

#include <algorithm>

#include "util/error.h"

namespace peregrine {
namespace {

// Whether the target keeps proposal x (drawn from q) given its own distribution p.
bool accept(Sampler& sampler, const TokenDistribution& p, const TokenDistribution& q, TokenId x) {
  if (p.greedy) return p.ids.front() == x;
  const double qx = q.prob(x);
  if (qx <= 0) return false;  // a proposal its own distribution could not give: never trust it
  const double ratio = p.prob(x) / qx;
  return sampler.uniform() < std::min(1.0, ratio);
}

}  // namespace

Verdict verify(Sampler& sampler, std::span<const TokenId> history, std::span<const TokenId> draft,
               std::span<const TokenDistribution> draft_q, std::span<const float> logits, int64_t n_vocab) {
  const auto k = static_cast<int64_t>(draft.size());
  if (static_cast<int64_t>(draft_q.size()) != k || static_cast<int64_t>(logits.size()) != (k + 1) * n_vocab) {
    throw UsageError("verify: " + std::to_string(k) + " proposals need as many distributions and " +
                     std::to_string(k + 1) + " logits rows");
  }
  auto row = [&](int64_t i) {
    return logits.subspan(static_cast<size_t>(i * n_vocab), static_cast<size_t>(n_vocab));
  };
  Verdict v;
  std::vector<TokenId> hist(history.begin(), history.end());
  for (int64_t i = 0; i < k; ++i) {
    const TokenDistribution p = sampler.distribution(row(i), hist);
    const TokenId x = draft[static_cast<size_t>(i)];
    if (accept(sampler, p, draft_q[static_cast<size_t>(i)], x)) {
      v.tokens.push_back(sampler.report(x));
      ++v.n_accepted;
      hist.push_back(x);
      continue;
    }
    TokenId t = p.ids.front();
    if (!p.greedy) {
      const TokenDistribution r = residual(p, draft_q[static_cast<size_t>(i)]);
      t = sampler.sample_from(r.total > 0 ? r : p);
    }
    v.tokens.push_back(sampler.report(t));
    return v;
  }
  v.tokens.push_back(sampler.sample(row(k), hist));
  return v;
}

}  // namespace peregrine
