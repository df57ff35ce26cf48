// Sampler::distribution, sample_from and report, draw() and its coupling, and the speculative
// residual: the distribution is exactly what sample() draws from, so a draw from it at the same
// step gives the same token, and its probabilities are the filtered softmax computed
// independently here; draw() is the Gumbel-max of its weights, and coupled_agreement the share of
// keys at which two distributions draw the same token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
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
  // Its draw ignores the noise, and still counts as a step (a step is a token drawn).
  for (uint64_t step = 0; step < 20; ++step) EXPECT_EQ(draw(d, DrawKey{step * 7, step}), d.ids[0]);
  EXPECT_EQ(s.sample_from(d), d.ids[0]);
  EXPECT_EQ(s.next_draw().step, 1u);
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

// draw() against the Gumbel-max rule written out in its log form, argmax log w - log(-log u), on
// random distributions with zero weights and ids in no particular order; and listing the ids in
// another order gives the same token.
TEST(SamplerDistribution, DrawIsTheGumbelMaxOfItsWeightsInAnyOrder) {
  std::mt19937 gen(8);
  std::uniform_real_distribution<double> w(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    TokenDistribution d;
    for (int32_t id = 0; id < 30; ++id) {
      d.ids.push_back((id * 17 + trial) % 30);
      d.weights.push_back(id % 7 == 3 ? 0.0 : std::pow(w(gen), 4.0));
      d.total += d.weights.back();
    }
    const DrawKey key{static_cast<uint64_t>(trial % 3), static_cast<uint64_t>(trial)};
    const uint64_t step_key = draw_step_key(key.seed, key.step);
    int32_t want = -1;
    double best = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < d.ids.size(); ++i) {
      if (d.weights[i] <= 0) continue;
      const double u = open_unit(draw_bits(step_key, static_cast<uint32_t>(d.ids[i])));
      const double score = std::log(d.weights[i]) - std::log(-std::log(u));
      if (score > best) best = score, want = d.ids[i];
    }
    EXPECT_EQ(draw(d, key), want) << trial;
    TokenDistribution reversed = d;
    std::reverse(reversed.ids.begin(), reversed.ids.end());
    std::reverse(reversed.weights.begin(), reversed.weights.end());
    EXPECT_EQ(draw(reversed, key), want) << trial;
  }
  EXPECT_EQ(draw(TokenDistribution::one_hot(9), DrawKey{1, 2}), 9);  // greedy: the noise does not matter
}

// Consecutive steps draw independently: the pairs (token at step n, token at step n + 1) follow
// p x p (a chi-square over the 16 cells of a 4-token distribution).
TEST(SamplerDistribution, ConsecutiveStepsDrawIndependently) {
  const TokenDistribution d = listed({3, 0, 2, 1}, {0.1, 0.2, 0.3, 0.4});
  constexpr int kN = 60000;
  int cells[4][4] = {};
  int32_t prev = draw(d, DrawKey{5, 0});
  for (uint64_t step = 1; step <= kN; ++step) {
    const int32_t t = draw(d, DrawKey{5, step});
    ++cells[prev][t];
    prev = t;
  }
  double chi2 = 0;
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      const double e = d.prob(a) * d.prob(b) * kN;
      chi2 += (cells[a][b] - e) * (cells[a][b] - e) / e;
    }
  }
  EXPECT_LT(chi2, 37.70);  // 15 degrees of freedom, p = 0.001
}

TEST(SamplerDistribution, SharedMassAndCoupledAgreementByHand) {
  const TokenDistribution p = listed({1, 2, 3}, {0.5, 0.3, 0.2});
  const TokenDistribution q = listed({1, 2, 3}, {0.4, 0.4, 0.2});
  EXPECT_NEAR(shared_mass(p, q), 0.4 + 0.3 + 0.2, 1e-12);
  // sum_x 1 / sum_y max(p_y / p_x, q_y / q_x): x = 1: 1 / (1 + 1 + .5), x = 2: 1 / (5/3 + 1 + 2/3),
  // x = 3: 1 / (2.5 + 2 + 1).
  EXPECT_NEAR(coupled_agreement(p, q), 0.4 + 0.3 + 1 / 5.5, 1e-12);
  // The order the ids are listed in does not matter to either.
  const TokenDistribution q_other = listed({3, 1, 2}, {0.2, 0.4, 0.4});
  EXPECT_NEAR(shared_mass(p, q_other), 0.9, 1e-12);
  EXPECT_NEAR(coupled_agreement(p, q_other), 0.4 + 0.3 + 1 / 5.5, 1e-12);
  EXPECT_NEAR(coupled_agreement(p, p), 1.0, 1e-12);
  EXPECT_NEAR(coupled_agreement(p, TokenDistribution::one_hot(2)), 0.3, 1e-12);  // = p(2)
  EXPECT_NEAR(coupled_agreement(p, listed({4}, {1})), 0.0, 1e-12);
}

// coupled_agreement is the chance that the noise of one key draws the same token from both:
// counted over many keys on random distributions, with ids missing from one side.
TEST(SamplerDistribution, CoupledAgreementIsTheShareOfKeysDrawingTheSameToken) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> w(0.0, 1.0);
  for (int trial = 0; trial < 12; ++trial) {
    TokenDistribution p, q;
    auto maybe_add = [&](TokenDistribution& d, int32_t id) {
      if (w(gen) >= 0.8) return;  // about one id in five is missing
      d.ids.push_back(id);
      d.weights.push_back(w(gen));
      d.total += d.weights.back();
    };
    for (int32_t id = 0; id < 12; ++id) {
      maybe_add(p, id);
      maybe_add(q, 11 - id);
    }
    if (p.ids.empty() || q.ids.empty()) continue;
    const int n = 50000;
    int same = 0;
    for (int i = 0; i < n; ++i) {
      const DrawKey key{static_cast<uint64_t>(trial), static_cast<uint64_t>(i)};
      same += draw(p, key) == draw(q, key) ? 1 : 0;
    }
    // The standard error of the count is at most 0.5 / sqrt(n) = 0.0022.
    EXPECT_NEAR(coupled_agreement(p, q), static_cast<double>(same) / n, 0.011) << trial;
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

TEST(SamplerDistribution, TheNextDrawKeyGivesTheNoiseOfTheNextDraws) {
  SamplingParams sp = params(1.0f, 0, 1.0f, 0.f, 77);
  sp.repetition_penalty = 1.0f;
  Sampler s(sp);
  const auto logits = random_logits(64, 9);
  const TokenDistribution d = s.distribution(logits, {});
  DrawKey ahead = s.next_draw();
  EXPECT_EQ(ahead.seed, 77u);
  EXPECT_EQ(ahead.step, 0u);
  for (int i = 0; i < 50; ++i, ++ahead.step) EXPECT_EQ(draw(d, ahead), s.sample_from(d)) << i;
}

TEST(SamplerDistribution, EmptyDistributionIsAnError) {
  Sampler s(SamplingParams{});
  EXPECT_THROW(s.sample_from(TokenDistribution{}), UsageError);
}

}  // namespace
}  // namespace peregrine
