// Sampler::distribution, sample_from and report, and the speculative residual: the distribution
// is exactly what sample() draws from, so a draw from it with the same generator state gives the
// same token, and its probabilities are the filtered softmax computed independently here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "sampling/sampler.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> l(n);
  for (auto& x : l) x = nd(gen);
  return l;
}

SamplingParams params(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  p.repetition_penalty = 1.3f;
  p.penalty_last_n = 8;
  return p;
}

TEST(SamplerDistribution, SampleFromTheDistributionIsSample) {
  const std::vector<int32_t> history = {3, 3, 17, 40};
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const auto logits = random_logits(300, static_cast<uint32_t>(seed));
    const SamplingParams p = params(0.7f + 0.05f * static_cast<float>(seed % 5), seed % 3 == 0 ? 20 : 0, 0.9f,
                                    seed % 2 ? 0.02f : 0.f, seed);
    Sampler a(p), b(p);
    for (int step = 0; step < 5; ++step) {
      const SampleResult direct = a.sample(logits, history);
      const TokenDistribution d = b.distribution(logits, history);
      const int32_t token = b.sample_from(d);
      ASSERT_EQ(token, direct.token) << "seed " << seed << " step " << step;
      const SampleResult rep = b.report(token);
      EXPECT_EQ(rep.logprob, direct.logprob);
      EXPECT_GT(d.prob(token), 0.0);
    }
  }
}

TEST(SamplerDistribution, ProbabilitiesAreTheFilteredTemperedSoftmax) {
  // Logits 0..5 for ids 0..5; top-k 4 keeps ids 5,4,3,2; temperature 0.5.
  const std::vector<float> logits = {0, 1, 2, 3, 4, 5};
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 4;
  Sampler s(p);
  const TokenDistribution d = s.distribution(logits, {});
  double z = 0;
  for (int i = 2; i <= 5; ++i) z += std::exp(i / 0.5);
  for (int i = 0; i < 6; ++i) {
    const double want = i >= 2 ? std::exp(i / 0.5) / z : 0.0;
    EXPECT_NEAR(d.prob(i), want, 1e-12) << i;
  }
  EXPECT_FALSE(d.greedy);
}

TEST(SamplerDistribution, GreedyIsOneHotAndTakesNoRandomness) {
  const auto logits = random_logits(100, 9);
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  const TokenDistribution d = s.distribution(logits, {});
  ASSERT_TRUE(d.greedy);
  ASSERT_EQ(d.ids.size(), 1u);
  EXPECT_EQ(d.ids[0], argmax(logits));
  EXPECT_DOUBLE_EQ(d.prob(d.ids[0]), 1.0);
  // Drawing from it does not advance the generator: a sampled draw afterwards is the seed's first.
  EXPECT_EQ(s.sample_from(d), d.ids[0]);
  TokenDistribution two;
  two.ids = {4, 7};
  two.weights = {1, 1};
  two.total = 2;
  Rng fresh(p.seed);
  EXPECT_EQ(s.sample_from(two), fresh.next_unit() < 0.5 ? 4 : 7);
}

TEST(SamplerDistribution, ResidualIsThePositivePartOfTheDifferenceNormalized) {
  TokenDistribution p, q;
  p.ids = {5, 1, 9};
  p.weights = {2, 1, 1};  // 0.5, 0.25, 0.25
  p.total = 4;
  q.ids = {1, 5, 7};
  q.weights = {3, 1, 0};  // 0.75, 0.25, 0
  q.total = 4;
  const TokenDistribution r = residual(p, q);
  // p - q: id 1: -0.5, id 5: +0.25, id 9: +0.25 -> {5: 0.5, 9: 0.5}
  ASSERT_EQ(r.ids, (std::vector<int32_t>{5, 9}));
  EXPECT_NEAR(r.prob(5), 0.5, 1e-15);
  EXPECT_NEAR(r.prob(9), 0.5, 1e-15);
  EXPECT_NEAR(r.prob(1), 0.0, 1e-15);
  // Equal distributions leave nothing.
  EXPECT_EQ(residual(p, p).total, 0.0);
  // One-hot q takes its token's mass away from p.
  const TokenDistribution r1 = residual(p, TokenDistribution::one_hot(5));
  EXPECT_NEAR(r1.prob(5), 0.0, 1e-15);
  EXPECT_NEAR(r1.prob(1), 0.5, 1e-15);
}

TokenDistribution listed(std::vector<int32_t> ids, std::vector<double> weights) {
  TokenDistribution d;
  d.ids = std::move(ids);
  d.weights = std::move(weights);
  for (double w : d.weights) d.total += w;
  return d;
}

TEST(SamplerDistribution, DrawWalksTheIdsInTheirListedOrder) {
  const TokenDistribution d = listed({7, 2, 4}, {1, 2, 1});  // [0, .25) -> 7, [.25, .75) -> 2, [.75, 1) -> 4
  EXPECT_EQ(draw(d, 0.0), 7);
  EXPECT_EQ(draw(d, 0.2499), 7);
  EXPECT_EQ(draw(d, 0.2501), 2);
  EXPECT_EQ(draw(d, 0.7501), 4);
  EXPECT_EQ(draw(TokenDistribution::one_hot(9), 0.99), 9);  // greedy: the uniform does not matter
}

TEST(SamplerDistribution, SharedMassAndCoupledAgreementByHand) {
  const TokenDistribution p = listed({1, 2, 3}, {0.5, 0.3, 0.2});
  const TokenDistribution q = listed({1, 2, 3}, {0.4, 0.4, 0.2});
  EXPECT_NEAR(shared_mass(p, q), 0.4 + 0.3 + 0.2, 1e-12);
  // Intervals: p 1:[0,.5) 2:[.5,.8) 3:[.8,1); q 1:[0,.4) 2:[.4,.8) 3:[.8,1): overlaps .4 + .3 + .2.
  EXPECT_NEAR(coupled_agreement(p, q), 0.9, 1e-12);
  // The same q walked in another order: 3:[0,.2) 1:[.2,.6) 2:[.6,1): overlaps 1: .3, 2: .2, 3: 0.
  const TokenDistribution q_other = listed({3, 1, 2}, {0.2, 0.4, 0.4});
  EXPECT_NEAR(shared_mass(p, q_other), 0.9, 1e-12);  // the order does not matter to sum min
  EXPECT_NEAR(coupled_agreement(p, q_other), 0.5, 1e-12);
  EXPECT_NEAR(coupled_agreement(p, p), 1.0, 1e-12);
  EXPECT_NEAR(coupled_agreement(p, TokenDistribution::one_hot(2)), 0.3, 1e-12);  // = p(2)
  EXPECT_NEAR(coupled_agreement(p, listed({4}, {1})), 0.0, 1e-12);
}

// coupled_agreement is the chance that one uniform draws the same token from both: counted over
// many uniforms on random distributions, with ids missing from one side and ragged orders.
TEST(SamplerDistribution, CoupledAgreementIsTheShareOfUniformsDrawingTheSameToken) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> w(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    TokenDistribution p, q;
    auto maybe_add = [&](TokenDistribution& d, int32_t id) {
      if (w(gen) >= 0.8) return;  // about one id in five is missing
      d.ids.push_back(id);
      d.weights.push_back(w(gen));
      d.total += d.weights.back();
    };
    for (int32_t id = 0; id < 12; ++id) {
      maybe_add(p, id);
      maybe_add(q, 11 - id);  // q walks its ids in the other direction
    }
    if (p.ids.empty() || q.ids.empty()) continue;
    const int n = 200000;
    int same = 0;
    for (int i = 0; i < n; ++i) {
      const double u = (i + 0.5) / n;
      same += draw(p, u) == draw(q, u) ? 1 : 0;
    }
    EXPECT_NEAR(coupled_agreement(p, q), static_cast<double>(same) / n, 1e-4) << trial;
    EXPECT_LE(coupled_agreement(p, q), shared_mass(p, q) + 1e-12) << trial;
  }
}

// Every filter setting leaves the candidates in increasing id order, so a draw walks the same order
// whatever the filters (top-k ranks them, then they are put back).
TEST(SamplerDistribution, CandidatesAreWalkedInIdOrderAfterEveryFilter) {
  const auto logits = random_logits(500, 3);
  for (const int32_t top_k : {0, 1, 7, 40, 600}) {
    for (const float top_p : {1.0f, 0.9f, 0.5f}) {
      Sampler s(params(0.8f, top_k, top_p, top_k == 7 ? 0.05f : 0.f, 1));
      const TokenDistribution d = s.distribution(logits, {});
      ASSERT_FALSE(d.ids.empty());
      EXPECT_TRUE(std::is_sorted(d.ids.begin(), d.ids.end())) << "top-k " << top_k << " top-p " << top_p;
      if (top_k > 0) {
        EXPECT_LE(d.ids.size(), static_cast<size_t>(top_k));
      }
    }
  }
}

TEST(SamplerDistribution, TheGeneratorCopyGivesTheUniformsOfTheNextDraws) {
  SamplingParams sp = params(1.0f, 0, 1.0f, 0.f, 77);
  sp.repetition_penalty = 1.0f;
  Sampler s(sp);
  const auto logits = random_logits(64, 9);
  const TokenDistribution d = s.distribution(logits, {});
  Rng ahead = s.generator();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw(d, ahead.next_unit()), s.sample_from(d)) << i;
}

TEST(SamplerDistribution, EmptyDistributionIsAnError) {
  Sampler s(SamplingParams{});
  EXPECT_THROW(s.sample_from(TokenDistribution{}), UsageError);
}

}  // namespace
}  // namespace peregrine
