// DraftPolicy: the number of drafts per step chosen from measured acceptance and step costs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/draft_policy.h"

namespace peregrine {
namespace {

// Feeds a machine whose steps cost fixed + row * rows ms (a little noise), a proposer that costs
// proposer_ms per position, and verifications accepting each token with probability alpha.
void feed(DraftPolicy& p, double fixed, double row, double proposer_ms, double alpha, int steps = 60) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, 0.01 * fixed);
  for (int i = 0; i < steps; ++i) {
    const int64_t k = 1 + i % 4, rows = 1 + k;
    int64_t accepted = 0;
    while (accepted < k && u(rng) < alpha) ++accepted;
    p.observe_proposer(k, proposer_ms * static_cast<double>(k));
    p.observe_decode_step(rows, fixed + row * static_cast<double>(rows) + noise(rng));
    p.observe_verification(k, accepted);
  }
}

TEST(DraftPolicy, ExploresWithTheLargestKUntilMeasured) {
  DraftPolicy p(4);
  EXPECT_FALSE(p.ready());
  EXPECT_EQ(p.choose_k(0, 1), 4);
}

TEST(DraftPolicy, RecoversCostsAndAcceptance) {
  DraftPolicy p(4);
  feed(p, 10.0, 0.5, 0.2, 0.7, 400);
  ASSERT_TRUE(p.ready());
  EXPECT_NEAR(p.fixed_ms(), 10.0, 0.3);
  EXPECT_NEAR(p.row_ms(), 0.5, 0.1);
  EXPECT_NEAR(p.proposer_ms(), 0.2, 1e-9);
  EXPECT_NEAR(p.acceptance(), 0.7, 0.08);
  EXPECT_NEAR(p.predict_ms(3), 11.5, 0.3);
  EXPECT_NEAR(p.predict_ms(9), 14.5, 0.5);  // beyond the rows seen: the nearest two extended
  // One speculating sequence, K = 2: (1 + a + a^2) tokens in a 3-row step + 2 proposer positions.
  const double a = p.acceptance();
  const double want = (1 + a + a * a) / (p.predict_ms(3) + 2 * p.proposer_ms());
  EXPECT_NEAR(p.tokens_per_ms(2, 0, 1), want, 1e-9);
  // A step stalled by other load barely moves the estimate; faster steps are believed at once.
  p.observe_decode_step(3, 200.0);
  EXPECT_LT(p.predict_ms(3), 11.5 + 0.05 * 200);
  p.observe_decode_step(3, 9.0);
  p.observe_decode_step(3, 9.0);
  EXPECT_LT(p.predict_ms(3), 12.0);
}

TEST(DraftPolicy, MemoryBoundStepsSpeculateFully) {
  // A row costs 2% of the weight read: K + 1 rows cost about one step.
  DraftPolicy p(4);
  feed(p, 20.0, 0.4, 0.1, 0.8);
  ASSERT_TRUE(p.ready());
  EXPECT_EQ(p.choose_k(0, 1), 4);
}

TEST(DraftPolicy, ComputeBoundStepsDoNotSpeculateButProbe) {
  // Every row costs as much as the fixed part (weights in cache), and half the drafts fail:
  // 1 + 0.5 tokens for twice the time never pays.
  DraftPolicy p(4);
  feed(p, 0.2, 0.2, 0.05, 0.5);
  ASSERT_TRUE(p.ready());
  int zeros = 0, ones = 0, fours = 0;
  for (int i = 0; i < 128; ++i) {
    const int64_t k = p.choose_k(0, 1);
    zeros += k == 0;
    ones += k == 1;
    fours += k == 4;
  }
  // A probe every 32 steps keeps the estimates current: K = 1 for the acceptance, K = 4 for the
  // cost of the largest pass.
  EXPECT_EQ(zeros, 124);
  EXPECT_EQ(ones, 2);
  EXPECT_EQ(fours, 2);
}

TEST(DraftPolicy, ASlowFirstMeasurementOfTheLargestPassDoesNotKeepSpeculationOff) {
  // The first 5-row steps ran while the machine was busy (4 ms against a 1 ms step): off. The
  // machine is in fact memory-bound (1 ms + 0.02 ms a row) and drafts are accepted 90 % of the
  // time; the K = 4 probes measure that, and speculation comes back.
  DraftPolicy p(4);
  for (int i = 0; i < 12; ++i) {
    p.observe_proposer(4, 0.01);
    p.observe_decode_step(i % 2 == 0 ? 1 : 5, i % 2 == 0 ? 1.0 : 4.0);
    if (i % 2 == 1) p.observe_verification(4, 3);
  }
  ASSERT_TRUE(p.ready());
  ASSERT_EQ(p.choose_k(0, 1), 0);
  // The first probe's faster 5-row step replaces the estimate (a faster step is believed at once).
  int fours_at_end = 0;
  for (int step = 0; step < 400; ++step) {
    const int64_t k = p.choose_k(0, 1);
    p.observe_decode_step(1 + k, 1.0 + 0.02 * static_cast<double>(1 + k));
    if (k > 0) p.observe_verification(k, k - 1 + (step % 10 != 0));
    fours_at_end += step >= 380 && k == 4;
  }
  EXPECT_EQ(fours_at_end, 20);
}

TEST(DraftPolicy, LargeBatchesStopSpeculating) {
  // Memory-bound at batch 1 (the row costs 5% of the fixed part), but with 16 sequences each
  // verified row adds compute for all of them.
  DraftPolicy p(4);
  feed(p, 10.0, 0.5, 0.3, 0.6);
  ASSERT_TRUE(p.ready());
  EXPECT_GE(p.choose_k(0, 1), 2);
  EXPECT_EQ(p.choose_k(0, 64), 0);
}

TEST(DraftPolicy, AFreeProposerIsProbedMoreOftenWhileOff) {
  // A lookup proposer (no model pass) whose first proposals were all rejected: off, as for a
  // costly one, but it is probed every 8 steps instead of 32, so speculation comes back soon once
  // its proposals start being right (a text that has begun to repeat itself).
  DraftPolicy off_free(4), off_costly(4);
  feed(off_free, 0.2, 0.2, 0.0, 0.0);
  feed(off_costly, 0.2, 0.2, 0.05, 0.0);
  ASSERT_TRUE(off_free.ready() && off_costly.ready());
  int probes_free = 0, probes_costly = 0;
  for (int i = 0; i < 64; ++i) {
    probes_free += off_free.choose_k(0, 1) > 0;
    probes_costly += off_costly.choose_k(0, 1) > 0;
  }
  EXPECT_EQ(probes_free, 8);
  EXPECT_EQ(probes_costly, 2);
}

}  // namespace
}  // namespace peregrine
