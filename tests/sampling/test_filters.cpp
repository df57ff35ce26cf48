// Each pipeline step on hand-built inputs (exact kept sets / values), and every ranking shortcut
// against a plain full-sort reference on random, tie-rich, ragged-size inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "sampling/filters.h"

namespace peregrine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<Candidate> from_logits(const std::vector<float>& logits) {
  std::vector<Candidate> c;
  finite_candidates(logits, c);
  return c;
}

std::vector<int32_t> ids_of(const std::vector<Candidate>& c) {
  std::vector<int32_t> ids;
  for (const auto& x : c) ids.push_back(x.id);
  return ids;
}

// Logits whose softmax is exactly the given probabilities (up to float rounding).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Random logits with many exact ties (drawn from a small grid), never all equal.
std::vector<float> tie_rich_logits(size_t n, std::mt19937& gen) {
  std::uniform_int_distribution<int> grid(-40, 40);
  std::vector<float> l(n);
  for (auto& x : l) x = static_cast<float>(grid(gen)) * 0.25f;
  return l;
}

std::vector<Candidate> ranked_reference(const std::vector<float>& logits) {
  auto c = from_logits(logits);
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    if (a.logit != b.logit) return a.logit > b.logit;
    return a.id < b.id;
  });
  return c;
}

TEST(Filters, ArgmaxTiesGoToLowestId) {
  EXPECT_EQ(argmax(std::vector<float>{1, 5, 2, 5, 5}), 1);
  EXPECT_EQ(argmax(std::vector<float>{kNegInf, kNegInf, -3}), 2);
  EXPECT_EQ(argmax(std::vector<float>{7}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-1, -1, -1}), 0);
}

TEST(Filters, LogitBiasAddsPerToken) {
  std::vector<float> l{1, 2, 3, 4};
  std::vector<std::pair<int32_t, float>> bias{{3, -10.f}, {0, 2.5f}, {2, kNegInf}};
  apply_logit_bias(l, bias);
  EXPECT_EQ(l, (std::vector<float>{3.5f, 2, kNegInf, -6}));
}

TEST(Filters, PenaltiesExactValues) {
  // token 0 appears 3x, token 1 2x, token 3 once; tokens 2 and 4 never.
  std::vector<float> l{2, -2, 1, 0, 3};
  std::vector<int32_t> history{0, 1, 1, 3, 0, 0};
  apply_penalties(l, history, {.repetition = 2.f, .frequency = 0.5f, .presence = 0.25f, .last_n = -1});
  EXPECT_FLOAT_EQ(l[0], 2.f / 2 - 3 * 0.5f - 0.25f);   // positive: divided
  EXPECT_FLOAT_EQ(l[1], -2.f * 2 - 2 * 0.5f - 0.25f);  // negative: multiplied
  EXPECT_FLOAT_EQ(l[2], 1.f);
  EXPECT_FLOAT_EQ(l[3], 0.f * 2 - 0.5f - 0.25f);       // zero stays zero under repetition
  EXPECT_FLOAT_EQ(l[4], 3.f);
}

TEST(Filters, PenaltiesEachKindAlone) {
  std::vector<int32_t> history{1, 1, 2};
  std::vector<float> rep{4, 4, -4};
  apply_penalties(rep, history, {.repetition = 1.25f, .last_n = -1});
  EXPECT_EQ(rep, (std::vector<float>{4, 4 / 1.25f, -4 * 1.25f}));
  std::vector<float> freq{4, 4, -4};
  apply_penalties(freq, history, {.frequency = 1.5f, .last_n = -1});
  EXPECT_EQ(freq, (std::vector<float>{4, 1, -5.5f}));
  std::vector<float> pres{4, 4, -4};
  apply_penalties(pres, history, {.presence = 0.75f, .last_n = -1});
  EXPECT_EQ(pres, (std::vector<float>{4, 3.25f, -4.75f}));
  std::vector<float> neg_freq{4, 4, -4};  // negative penalties encourage repetition (OpenAI)
  apply_penalties(neg_freq, history, {.frequency = -1.f, .last_n = -1});
  EXPECT_EQ(neg_freq, (std::vector<float>{4, 6, -3}));
}

TEST(Filters, PenaltyWindow) {
  std::vector<int32_t> history{5, 6, 7, 8};
  EXPECT_EQ(penalty_window(history, 2).size(), 2u);
  EXPECT_EQ(penalty_window(history, 2)[0], 7);
  EXPECT_EQ(penalty_window(history, -1).size(), 4u);
  EXPECT_EQ(penalty_window(history, 64).size(), 4u);
  EXPECT_EQ(penalty_window(history, 0).size(), 0u);
  // Only the window is penalized.
  std::vector<float> l(9, 1.f);
  apply_penalties(l, penalty_window(history, 2), {.presence = 1.f, .last_n = 2});
  EXPECT_EQ(l, (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 0, 0}));
  // last_n = 0 switches penalties off entirely.
  std::vector<float> off(9, 1.f);
  apply_penalties(off, history, {.presence = 1.f, .last_n = 0});
  EXPECT_EQ(off, std::vector<float>(9, 1.f));
}

TEST(Filters, FiniteCandidatesDropMaskedTokens) {
  auto c = from_logits({kNegInf, 1, kNegInf, -2});
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 3}));
}

TEST(Filters, TopKExactSetWithTies) {
  std::vector<float> l{1, 3, 3, 2, 0, 2};
  std::vector<Candidate> c;
  top_k_candidates(l, 2, c);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 2}));
  top_k_candidates(l, 3, c);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 2, 3}));  // tie 3 vs 5 -> lower id
  top_k_candidates(l, 100, c);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 2, 3, 5, 0, 4}));
}

TEST(Filters, TopPExactSets) {
  // probs (shuffled): id0 .15, id1 .05, id2 .5, id3 .1, id4 .2
  const auto l = logits_for({0.15, 0.05, 0.5, 0.1, 0.2});
  auto run = [&](float p) {
    auto c = from_logits(l);
    keep_top_p(c, p);
    return ids_of(c);
  };
  EXPECT_EQ(run(0.01f), (std::vector<int32_t>{2}));
  EXPECT_EQ(run(0.45f), (std::vector<int32_t>{2}));
  // The kept set keeps the input (id) order.
  EXPECT_EQ(run(0.6f), (std::vector<int32_t>{2, 4}));        // .5 + .2 = .7 >= .6
  EXPECT_EQ(run(0.75f), (std::vector<int32_t>{0, 2, 4}));    // .85
  EXPECT_EQ(run(0.9f), (std::vector<int32_t>{0, 2, 3, 4}));  // .95
  EXPECT_EQ(run(0.99f), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(run(1.0f), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Filters, TopKNeverKeepsMaskedTokens) {
  std::vector<Candidate> c;
  top_k_candidates(std::vector<float>{kNegInf, 1, kNegInf, 2}, 3, c);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{3, 1}));
  top_k_candidates(std::vector<float>(300, kNegInf), 5, c);
  EXPECT_TRUE(c.empty());
}

TEST(Filters, TopKHugeKKeepsAllWithoutOutgrowingTheVocabulary) {
  // The API accepts top_k up to 2^20 and the CLI 2^24: scratch must stay vocabulary-sized.
  std::mt19937 gen(15);
  const auto l = tie_rich_logits(1000, gen);
  const auto ref = ranked_reference(l);
  for (int32_t k : {1000, 1001, 1 << 20, std::numeric_limits<int32_t>::max()}) {
    std::vector<Candidate> c;
    top_k_candidates(l, k, c);
    ASSERT_EQ(c.size(), l.size()) << k;
    EXPECT_LE(c.capacity(), l.size()) << k;
    for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i].id, ref[i].id) << k;
  }
  std::vector<Candidate> c{{0, 1.f}};
  top_k_candidates(std::span<const float>(), 40, c);
  EXPECT_TRUE(c.empty());
}

TEST(Filters, MaxValueAndBadLogitScanOnRaggedSizes) {
  std::mt19937 gen(14);
  std::normal_distribution<float> d(0.f, 3.f);
  for (size_t n : {1u, 7u, 8u, 9u, 31u, 1000u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = d(gen);
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      auto y = x;
      y[at] = 100.f;
      EXPECT_EQ(max_value(y), 100.f) << n << " " << at;
      EXPECT_FALSE(any_nan_or_pos_inf(y));
      y[at] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(any_nan_or_pos_inf(y)) << n << " " << at;
      y[at] = std::numeric_limits<float>::infinity();
      EXPECT_TRUE(any_nan_or_pos_inf(y)) << n << " " << at;
      y[at] = kNegInf;
      EXPECT_FALSE(any_nan_or_pos_inf(y));
    }
  }
  EXPECT_EQ(max_value(std::vector<float>(9, kNegInf)), kNegInf);
}

TEST(Filters, TopPAfterTopKRenormalizes) {
  // After top-k = 2 the survivors are .5 and .2 -> renormalized .714 / .286.
  std::vector<Candidate> c;
  top_k_candidates(logits_for({0.15, 0.05, 0.5, 0.1, 0.2}), 2, c);
  keep_top_p(c, 0.7f);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{2}));
  top_k_candidates(logits_for({0.15, 0.05, 0.5, 0.1, 0.2}), 2, c);
  keep_top_p(c, 0.72f);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{2, 4}));
}

TEST(Filters, MinPExactSetKeepsOrder) {
  const auto l = logits_for({0.15, 0.05, 0.5, 0.1, 0.2});
  auto run = [&](float m) {
    auto c = from_logits(l);
    keep_min_p(c, m);
    return ids_of(c);
  };
  EXPECT_EQ(run(0.25f), (std::vector<int32_t>{0, 2, 4}));  // p >= .125
  EXPECT_EQ(run(0.15f), (std::vector<int32_t>{0, 2, 3, 4}));  // p >= .075
  EXPECT_EQ(run(0.5f), (std::vector<int32_t>{2}));  // p >= .25
  EXPECT_EQ(run(1.0f), (std::vector<int32_t>{2}));
  EXPECT_EQ(run(0.0f), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Filters, TopKMatchesFullSortOnRaggedSizes) {
  std::mt19937 gen(11);
  for (size_t n : {1u, 2u, 7u, 63u, 64u, 65u, 129u, 1000u, 4099u}) {
    const auto l = tie_rich_logits(n, gen);
    const auto ref = ranked_reference(l);
    for (int32_t k : {1, 2, 5, 64, 100, 5000}) {
      std::vector<Candidate> c;
      top_k_candidates(l, k, c);
      const size_t keep = std::min<size_t>(n, static_cast<size_t>(k));
      ASSERT_EQ(c.size(), keep) << "n=" << n << " k=" << k;
      for (size_t i = 0; i < keep; ++i) ASSERT_EQ(c[i].id, ref[i].id) << "n=" << n << " k=" << k;
    }
  }
}

TEST(Filters, TopKMatchesFullSortInEveryInputOrder) {
  // Ascending input makes every token enter the buffer; descending, almost none after the first
  // cut; all-equal logits leave only the ids to decide.
  std::mt19937 gen(13);
  for (size_t n : {5u, 64u, 1000u, 5000u}) {
    auto l = tie_rich_logits(n, gen);
    std::vector<std::vector<float>> orders{l, l, l, std::vector<float>(n, 0.5f)};
    std::sort(orders[1].begin(), orders[1].end());
    std::sort(orders[2].begin(), orders[2].end(), std::greater<>());
    for (const auto& o : orders) {
      const auto ref = ranked_reference(o);
      for (int32_t k : {1, 3, 40, 999}) {
        std::vector<Candidate> c;
        top_k_candidates(o, k, c);
        ASSERT_EQ(c.size(), std::min<size_t>(n, static_cast<size_t>(k)));
        for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i].id, ref[i].id) << "n=" << n << " k=" << k;
      }
    }
  }
}

TEST(Filters, TopKExactAtExtremeLogitRanges) {
  // The largest and smallest floats, subnormal steps, and clusters far from the maximum.
  const float big = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<std::vector<float>> cases{
      {big, -big, 0, big, -big, 1},
      {0, tiny, 2 * tiny, tiny, 0, 3 * tiny, -tiny},
      {1e30f, 1, 1 + 1e-7f, 1, 1, 1 - 1e-7f, 1, -1e30f},
      {100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -100},
  };
  for (const auto& l : cases) {
    const auto ref = ranked_reference(l);
    for (int32_t k : {1, 2, 3, 5}) {
      std::vector<Candidate> c;
      top_k_candidates(l, k, c);
      ASSERT_EQ(c.size(), static_cast<size_t>(k));
      for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i].id, ref[i].id) << "k=" << k << " l[0]=" << l[0];
    }
  }
}

TEST(Filters, TopPMatchesFullSortReferenceOnRaggedSizes) {
  std::mt19937 gen(12);
  for (size_t n : {1u, 3u, 32u, 33u, 63u, 64u, 65u, 200u, 1000u, 10007u, 65536u}) {
    auto l = tie_rich_logits(n, gen);
    if (n > 10) l[n / 3] = kNegInf;  // masked tokens never take part
    const auto ref = ranked_reference(l);
    double total = 0;
    for (const auto& c : ref) total += std::exp(static_cast<double>(c.logit) - ref[0].logit);
    for (float p : {0.001f, 0.05f, 0.3f, 0.5f, 0.9f, 0.999f}) {
      // Reference: shortest prefix of the fully sorted list reaching p.
      size_t keep = ref.size();
      double cum = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        cum += std::exp(static_cast<double>(ref[i].logit) - ref[0].logit) / total;
        if (cum >= p) { keep = i + 1; break; }
      }
      auto c = from_logits(l);
      keep_top_p(c, p);
      // Same set, in id order (the input order).
      std::vector<int32_t> want;
      for (size_t i = 0; i < keep; ++i) want.push_back(ref[i].id);
      std::sort(want.begin(), want.end());
      ASSERT_EQ(ids_of(c), want) << "n=" << n << " p=" << p;
      // Input already in rank order is walked and stays in rank order.
      auto ranked = ref;
      keep_top_p(ranked, p);
      ASSERT_EQ(ranked.size(), keep);
      for (size_t i = 0; i < keep; ++i) ASSERT_EQ(ranked[i].id, ref[i].id);
    }
  }
}

TEST(Filters, BestNMatchesFullSort) {
  std::mt19937 gen(13);
  for (size_t n : {1u, 5u, 20u, 21u, 333u, 5000u}) {
    auto l = tie_rich_logits(n, gen);
    if (n > 2) l[0] = kNegInf;
    const auto ref = ranked_reference(l);
    for (size_t want : {0u, 1u, 5u, 20u}) {
      const auto got = best_n(l, want);
      ASSERT_EQ(got.size(), std::min(want, ref.size()));
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].id, ref[i].id);
        ASSERT_EQ(got[i].logit, ref[i].logit);
      }
    }
  }
  EXPECT_TRUE(best_n(std::vector<float>{kNegInf, kNegInf}, 5).empty());
}

TEST(Filters, LogSumExpMatchesDouble) {
  std::mt19937 gen(14);
  std::normal_distribution<float> nd(0.f, 5.f);
  std::vector<float> l(777);
  for (auto& x : l) x = nd(gen);
  l[3] = kNegInf;
  double max = -1e300;
  for (float x : l) max = std::max(max, static_cast<double>(x));
  double s = 0;
  for (float x : l) s += std::exp(static_cast<double>(x) - max);
  // Terms in float (about an ulp each), summed in double: a relative error of ~1e-7 in the sum.
  EXPECT_NEAR(log_sum_exp(l), max + std::log(s), 1e-6);
  EXPECT_EQ(log_sum_exp(std::vector<float>{kNegInf}), -std::numeric_limits<double>::infinity());
  // Huge logits do not overflow.
  EXPECT_NEAR(log_sum_exp(std::vector<float>{1e30f, 1e30f}), static_cast<double>(1e30f) + std::log(2.0), 1e17);
}

TEST(Filters, DrawIndexWalksCumulativeDistribution) {
  // probs .25 .5 .25 at T = 1
  const std::vector<Candidate> c{{10, std::log(1.f)}, {11, std::log(2.f)}, {12, std::log(1.f)}};
  EXPECT_EQ(draw_index(c, 1.f, 0.0), 0u);
  EXPECT_EQ(draw_index(c, 1.f, 0.2499), 0u);
  EXPECT_EQ(draw_index(c, 1.f, 0.2501), 1u);
  EXPECT_EQ(draw_index(c, 1.f, 0.7499), 1u);
  EXPECT_EQ(draw_index(c, 1.f, 0.7501), 2u);
  EXPECT_EQ(draw_index(c, 1.f, 0.9999999999999999), 2u);
  // T = 0.5 squares the weights: 1/6 4/6 1/6.
  EXPECT_EQ(draw_index(c, 0.5f, 0.16), 0u);
  EXPECT_EQ(draw_index(c, 0.5f, 0.17), 1u);
  EXPECT_EQ(draw_index(c, 0.5f, 0.84), 2u);
  // A tiny temperature makes it greedy.
  EXPECT_EQ(draw_index(c, 1e-30f, 0.99), 1u);
}

}  // namespace
}  // namespace peregrine
