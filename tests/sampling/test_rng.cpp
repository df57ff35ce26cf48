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

}  // namespace
}  // namespace peregrine
