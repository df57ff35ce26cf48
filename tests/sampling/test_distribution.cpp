// Sampler::distribution, sample_from and report, and the speculative residual: the distribution
// is exactly what sample() draws from, so a draw from it with the same generator state gives the
// same token, and its probabilities are the filtered softmax computed independently here.
#include <gtest/gtest.h>

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

TEST(SamplerDistribution, EmptyDistributionIsAnError) {
  Sampler s(SamplingParams{});
  EXPECT_THROW(s.sample_from(TokenDistribution{}), UsageError);
}

}  // namespace
}  // namespace peregrine
