// The dispatch table: every path this CPU runs fills every required entry, and its attention
// tile functions agree with the scalar path (exactly where the arithmetic is the same, within
// float rounding where a vector path sums in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/ops.h"

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
                k.tile_scores && k.scale_max && k.sum_exp && k.exp_shifted && k.accumulate_rows && k.scale &&
                k.dequantize_kv_q8_row && k.glu)
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
    for (int64_t hd : {4, 8, 13, 32, 40, 64}) {
      for (int64_t nk : {1, 7, 32}) {
        const int64_t nq = 3;
        const auto keys = random_floats(static_cast<size_t>(nk * hd), 1);
        const auto qs = random_floats(static_cast<size_t>(nq * hd), 2);
        std::vector<float> s_ref(static_cast<size_t>(nq * 32), 0.f), s(s_ref);
        ref.tile_scores(keys.data(), nk, qs.data(), nq, hd, s_ref.data(), 32);
        k.tile_scores(keys.data(), nk, qs.data(), nq, hd, s.data(), 32);
        for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], s_ref[i], 1e-5f) << isa_name(isa) << " hd " << hd;

        // scale_max: elementwise products (the same bits) and their maximum.
        auto m_ref = random_floats(static_cast<size_t>(nk), 5, -30.f, 30.f), m(m_ref);
        const float max_ref = ref.scale_max(m_ref.data(), 0.17677669f, nk);
        EXPECT_EQ(k.scale_max(m.data(), 0.17677669f, nk), max_ref) << isa_name(isa);
        EXPECT_EQ(m, m_ref) << isa_name(isa);
        EXPECT_EQ(k.scale_max(m.data(), 2.f, 0), -std::numeric_limits<float>::infinity()) << isa_name(isa);

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
        // The vector paths add each term by one fused multiply-add in order of i: the same bits.
        if (isa != Isa::Scalar) {
          auto y_avx2 = random_floats(static_cast<size_t>(hd), 4);
          kernel_table(Isa::Avx2).accumulate_rows(e_ref.data(), rows.data(), nk, y_avx2.data(), hd);
          EXPECT_EQ(y, y_avx2) << isa_name(isa) << " hd " << hd;
        }
      }
    }
  }
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

// The gated activations: every path within a few ulp of the scalar formula (std::exp, std::tanh)
// on random and extreme gates, and each element's bits independent of the slice it is computed in
// (matmul_glu activates each thread's rows; a row's elements must not depend on where they fall).
TEST(KernelTable, GluAgreesWithScalarAndDoesNotDependOnTheSlice) {
  for (Isa isa : supported_isas()) {
    const KernelTable& k = kernel_table(isa);
    for (Glu kind : {Glu::Silu, Glu::Gelu}) {
      for (size_t n : {1u, 7u, 8u, 9u, 37u, 688u}) {
        std::vector<float> gate = random_floats(n, static_cast<uint32_t>(11 + n), -12.f, 12.f);
        const std::vector<float> up = random_floats(n, static_cast<uint32_t>(12 + n), -3.f, 3.f);
        const float extremes[] = {0.f, -0.f, 1e-30f, -1e-30f, 90.f, -90.f, 200.f, -200.f, 1e30f, -1e30f};
        for (size_t i = 0; i < n && i < std::size(extremes); ++i) gate[3 * i % n] = extremes[i];
        std::vector<float> want(n), got(n), pieces(n);
        apply_glu(kind, gate, up, want);
        k.glu(kind, gate.data(), up.data(), got.data(), static_cast<int64_t>(n));
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << isa_name(isa) << " gate " << gate[i];
          EXPECT_NEAR(got[i], want[i], 1e-6f * (1.f + std::fabs(want[i]))) << isa_name(isa) << " gate " << gate[i];
        }
        // The same row in ragged slices: 3, 5, 1, 11, ... elements.
        for (size_t at = 0, step = 3; at < n; at += step, step = step * 7 % 13 + 1) {
          const size_t len = std::min(step, n - at);
          k.glu(kind, gate.data() + at, up.data() + at, pieces.data() + at, static_cast<int64_t>(len));
        }
        EXPECT_EQ(pieces, got) << isa_name(isa) << " n=" << n;
        // In place (out aliases gate), as the matmul and the CPU context call it.
        std::vector<float> inplace = gate;
        k.glu(kind, inplace.data(), up.data(), inplace.data(), static_cast<int64_t>(n));
        EXPECT_EQ(inplace, got) << isa_name(isa);
      }
    }
  }
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

// The log-sum-exp's sum (reported logprobs): every path within a few ulp of double exp, -inf
// logits contributing nothing, on lengths with and without a ragged tail.
TEST(KernelTable, SumExpAgreesWithDouble) {
  for (Isa isa : supported_isas()) {
    for (size_t n : {1u, 5u, 8u, 13u, 1024u, 32003u}) {
      std::vector<float> x = random_floats(n, static_cast<uint32_t>(21 + n), -40.f, 12.f);
      if (n > 1) x[n / 2] = -std::numeric_limits<float>::infinity();  // (not every one: m is finite)
      if (n > 3) x[1] = -200.f;
      float m = -std::numeric_limits<float>::infinity();
      for (float v : x) m = std::max(m, v);
      double want = 0;
      for (float v : x) want += std::exp(static_cast<double>(v) - static_cast<double>(m));
      const double got = kernel_table(isa).sum_exp(x.data(), m, static_cast<int64_t>(n));
      EXPECT_NEAR(got, want, 1e-6 * want) << isa_name(isa) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace peregrine
