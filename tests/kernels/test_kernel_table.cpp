// The dispatch table: every path this CPU runs fills every required entry, and its attention
// tile functions agree with the scalar path (exactly where the arithmetic is the same, within
// float rounding where a vector path sums in another order).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/kernel_table.h"

namespace peregrine {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(KernelTable, EverySupportedPathFillsTheRequiredEntries) {
  for (Isa isa : supported_isas()) {
    const KernelTable& k = kernel_table(isa);
    EXPECT_EQ(k.isa, isa);
    EXPECT_TRUE(k.dot_f32 && k.dequantize_row && k.quantize_q8_blocks && k.matmul_int8 && k.int8_scratch_bytes &&
                k.tile_scores && k.exp_shifted && k.accumulate_rows && k.scale && k.dequantize_kv_q8_row)
        << isa_name(isa);
    // Optional pairs come together.
    EXPECT_EQ(k.fused_dot == nullptr, k.dot_row == nullptr) << isa_name(isa);
    EXPECT_EQ(k.float_gemm == nullptr, k.matmul_float == nullptr) << isa_name(isa);
  }
}

TEST(KernelTable, UnsupportedPathIsRefused) {
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) {
      EXPECT_THROW(kernel_table(isa), std::invalid_argument);
    }
  }
}

TEST(KernelTable, AttentionTilesAgreeWithScalar) {
  const KernelTable& ref = kernel_table(Isa::Scalar);
  for (Isa isa : supported_isas()) {
    const KernelTable& k = kernel_table(isa);
    for (int64_t hd : {4, 8, 13, 64}) {
      for (int64_t nk : {1, 7, 32}) {
        const int64_t nq = 3;
        const auto keys = random_floats(static_cast<size_t>(nk * hd), 1);
        const auto qs = random_floats(static_cast<size_t>(nq * hd), 2);
        std::vector<float> s_ref(static_cast<size_t>(nq * 32), 0.f), s(s_ref);
        ref.tile_scores(keys.data(), nk, qs.data(), nq, hd, s_ref.data(), 32);
        k.tile_scores(keys.data(), nk, qs.data(), nq, hd, s.data(), 32);
        for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], s_ref[i], 1e-5f) << isa_name(isa) << " hd " << hd;

        // exp_shifted: values in place and their sum.
        auto e_ref = random_floats(static_cast<size_t>(nk), 3, -20.f, 0.f), e(e_ref);
        const float sum_ref = ref.exp_shifted(e_ref.data(), 0.f, nk);
        const float sum = k.exp_shifted(e.data(), 0.f, nk);
        EXPECT_NEAR(sum, sum_ref, 1e-6f * static_cast<float>(nk));
        for (int64_t i = 0; i < nk; ++i) EXPECT_NEAR(e[i], e_ref[i], 1e-6f * e_ref[i]) << isa_name(isa);

        // accumulate_rows: y += sum_i w_i rows_i.
        std::vector<const float*> rows;
        for (int64_t i = 0; i < nk; ++i) rows.push_back(keys.data() + i * hd);
        auto y_ref = random_floats(static_cast<size_t>(hd), 4), y(y_ref);
        ref.accumulate_rows(e_ref.data(), rows.data(), nk, y_ref.data(), hd);
        k.accumulate_rows(e_ref.data(), rows.data(), nk, y.data(), hd);
        for (int64_t c = 0; c < hd; ++c) EXPECT_NEAR(y[c], y_ref[c], 1e-5f);
      }
    }
  }
}

}  // namespace
}  // namespace peregrine
