// The accept/reject rule on hand-made distributions: whatever q a proposer samples from, the
// tokens the verifier emits at each position follow the target's p (chi-square over many seeded
// runs, sized to notice a 2% shift), and a deliberately wrong rule (accept every proposal) fails
// the same test (negative control). Greedy verification keeps the target's argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "engine/verifier.h"

namespace peregrine {
namespace {

constexpr int kVocab = 6;
// Two rows of target logits (positions 1 and 2, independent of the prefix: no penalties).
const std::vector<float> kTargetLogits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f,   // position 1
                                          -0.3f, 1.5f, 0.9f, 0.1f, -2.0f, 0.4f};  // position 2
// The proposer's distribution, deliberately unlike the target's.
const std::vector<double> kQ = {0.05, 0.30, 0.30, 0.05, 0.20, 0.10};

std::vector<double> softmax(std::span<const float> l) {
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(static_cast<double>(l[i]));
  for (double& v : p) v /= z;
  return p;
}

TokenDistribution distribution(const std::vector<double>& p) {
  TokenDistribution d;
  for (size_t i = 0; i < p.size(); ++i) {
    d.ids.push_back(static_cast<int32_t>(i));
    d.weights.push_back(p[i]);
    d.total += p[i];
  }
  return d;
}

// Chi-square statistic of counts against probabilities.
double chi2(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    x += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x;
}
constexpr double kChi2Critical5Dof = 20.52;  // p = 0.001: one false alarm in a thousand runs

using Rule = std::function<Verdict(Sampler&, std::span<const TokenId>, std::span<const TokenDistribution>)>;

// Runs `n` verifications of two proposals drawn from q and counts the emitted tokens per position.
std::vector<std::vector<int64_t>> position_counts(const Rule& rule, int64_t n) {
  std::vector<std::vector<int64_t>> counts(2, std::vector<int64_t>(kVocab, 0));
  std::mt19937_64 proposer(99);
  std::discrete_distribution<int> q(kQ.begin(), kQ.end());
  const TokenDistribution qd = distribution(kQ);
  for (int64_t i = 0; i < n; ++i) {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = static_cast<uint64_t>(i);
    Sampler sampler(sp);
    const std::vector<TokenId> draft = {q(proposer), q(proposer)};
    const std::vector<TokenDistribution> draft_q = {qd, qd};
    const Verdict v = rule(sampler, draft, draft_q);
    for (size_t pos = 0; pos < std::min<size_t>(2, v.tokens.size()); ++pos) ++counts[pos][static_cast<size_t>(v.tokens[pos].token)];
  }
  return counts;
}

Verdict exact_rule(Sampler& s, std::span<const TokenId> draft, std::span<const TokenDistribution> q) {
  std::vector<float> logits = kTargetLogits;
  logits.insert(logits.end(), kTargetLogits.begin(), kTargetLogits.begin() + kVocab);  // a third row for the bonus
  return verify(s, {}, draft, q, DraftKind::Independent, logits, kVocab);
}

// The wrong rule: every proposal accepted.
Verdict always_accept(Sampler& s, std::span<const TokenId> draft, std::span<const TokenDistribution>) {
  Verdict v;
  for (TokenId t : draft) v.tokens.push_back({t, 0.f, {}});
  v.n_accepted = static_cast<int64_t>(draft.size());
  return v;
}

TEST(Verifier, SampledProposalsYieldTheTargetsDistributionAtEveryPosition) {
  const int64_t n = 60000;
  const auto counts = position_counts(exact_rule, n);
  for (int pos = 0; pos < 2; ++pos) {
    const auto p = softmax(std::span<const float>(kTargetLogits).subspan(static_cast<size_t>(pos * kVocab), kVocab));
    EXPECT_LT(chi2(counts[static_cast<size_t>(pos)], p), kChi2Critical5Dof) << "position " << pos + 1;
  }
  // Power: the same number of draws tells p from p shifted by 2% of its mass.
  auto shifted = softmax(std::span<const float>(kTargetLogits).first(kVocab));
  shifted[3] -= 0.02;
  shifted[1] += 0.02;
  EXPECT_GT(chi2(counts[0], shifted), kChi2Critical5Dof) << "the test cannot see a 2% shift";
}

TEST(Verifier, NegativeControlAlwaysAcceptingFailsTheTest) {
  const auto counts = position_counts(always_accept, 60000);
  const auto p = softmax(std::span<const float>(kTargetLogits).first(kVocab));
  EXPECT_GT(chi2(counts[0], p), kChi2Critical5Dof);
}

TEST(Verifier, GreedyKeepsTheArgmaxAndStopsAtTheFirstMiss) {
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp);
  std::vector<float> logits = kTargetLogits;
  logits.insert(logits.end(), kTargetLogits.begin(), kTargetLogits.begin() + kVocab);
  // Argmaxes: position 1 -> 3, position 2 -> 1, position 3 -> 3.
  const std::vector<TokenDistribution> q = {TokenDistribution::one_hot(3), TokenDistribution::one_hot(1)};
  Verdict all = verify(s, {}, std::vector<TokenId>{3, 1}, q, DraftKind::Coupled, logits, kVocab);
  ASSERT_EQ(all.tokens.size(), 3u);
  EXPECT_EQ(all.n_accepted, 2);
  EXPECT_EQ(all.tokens[2].token, 3);
  const std::vector<TokenDistribution> q2 = {TokenDistribution::one_hot(3), TokenDistribution::one_hot(4)};
  Verdict miss = verify(s, {}, std::vector<TokenId>{3, 4}, q2, DraftKind::Coupled, logits, kVocab);
  ASSERT_EQ(miss.tokens.size(), 2u);
  EXPECT_EQ(miss.n_accepted, 1);
  EXPECT_EQ(miss.tokens[1].token, 1);  // the target's own choice replaces the miss
}

}  // namespace
}  // namespace peregrine
