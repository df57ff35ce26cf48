#include <gtest/gtest.h>

#include "sampling/rng.h"

namespace peregrine {
namespace {

// Reference values were computed with an independent Python transcription of the published
// algorithms; splitmix64(0)'s first output 0xe220a8397b1dcdaf is also the widely quoted one.
TEST(Rng, SplitMix64MatchesReference) {
  SplitMix64 sm(0);
  EXPECT_EQ(sm.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(sm.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(sm.next(), 0x06c45d188009454fULL);
}

TEST(Rng, Xoshiro256StarStarMatchesReference) {
  Rng zero(0);
  EXPECT_EQ(zero.next_u64(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(zero.next_u64(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(zero.next_u64(), 0x1a5f849d4933e6e0ULL);
  EXPECT_EQ(zero.next_u64(), 0x6aa594f1262d2d2cULL);
  Rng r42(42);
  EXPECT_EQ(r42.next_u64(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(r42.next_u64(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(r42.next_u64(), 0xae17533239e499a1ULL);
  EXPECT_EQ(r42.next_u64(), 0xecb8ad4703b360a1ULL);
}

TEST(Rng, UnitIsTop53BitsAndUniform) {
  Rng a(7), b(7);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(a.next_unit(), static_cast<double>(b.next_u64() >> 11) / 9007199254740992.0);
  Rng r(123);
  constexpr int kN = 100000;
  double sum = 0;
  int buckets[10] = {};
  for (int i = 0; i < kN; ++i) {
    double u = r.next_unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++buckets[static_cast<int>(u * 10)];
  }
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
  double chi2 = 0;
  for (int c : buckets) chi2 += (c - kN / 10.0) * (c - kN / 10.0) / (kN / 10.0);
  EXPECT_LT(chi2, 27.88);  // 9 degrees of freedom, p = 0.001
}

// The token draws' counter-based noise: pinned against the Python transcription, never 0 or 1,
// and uniform and without visible correlation along both counters (tokens of one step, one token
// over steps, neighbouring seeds).
TEST(Rng, DrawNoiseMatchesReferenceAndIsUniformAlongEveryCounter) {
  EXPECT_EQ(draw_step_key(0, 0), 0xa706dd2f4d197e6fULL);
  EXPECT_EQ(draw_step_key(42, 7), 0xbc16a3d4cc48678eULL);
  EXPECT_EQ(draw_bits(draw_step_key(42, 7), 0), 0x020a28ed9e2b2bc4ULL);
  EXPECT_EQ(draw_bits(draw_step_key(42, 7), 31999), 0xc6b592f83663763cULL);
  EXPECT_EQ(open_unit(0), 0x1.0p-53);
  EXPECT_EQ(open_unit(~uint64_t{0}), 1.0 - 0x1.0p-53);
  constexpr int kN = 40000;
  // Each of 3 walks: 4 x 4 buckets of (u_i, u_{i+1}), consecutive along the counter, so a
  // correlation between neighbours shows as well as a skewed marginal.
  const auto chi2_of_pairs = [&](auto unit_at) {
    int buckets[16] = {};
    for (int i = 0; i < kN; ++i) {
      const int a = static_cast<int>(unit_at(i) * 4), b = static_cast<int>(unit_at(i + 1) * 4);
      ++buckets[a * 4 + b];
    }
    double chi2 = 0;
    for (int c : buckets) chi2 += (c - kN / 16.0) * (c - kN / 16.0) / (kN / 16.0);
    return chi2;
  };
  const uint64_t key = draw_step_key(9, 3);
  const double along_tokens = chi2_of_pairs([&](int i) { return open_unit(draw_bits(key, static_cast<uint32_t>(i))); });
  const double along_steps = chi2_of_pairs([&](int i) { return open_unit(draw_bits(draw_step_key(9, i), 5)); });
  const double along_seeds = chi2_of_pairs([&](int i) { return open_unit(draw_bits(draw_step_key(i, 0), 0)); });
  EXPECT_LT(along_tokens, 37.70);  // 15 degrees of freedom, p = 0.001
  EXPECT_LT(along_steps, 37.70);
  EXPECT_LT(along_seeds, 37.70);
}

}  // namespace
}  // namespace peregrine
