// The integer (Q8 activation) path for every quantized weight type: the scalar reference against an
// independent double computation of the same arithmetic, every ISA path bit-identical to the
// scalar reference, batch/thread invariance, and the activation rounding error against exact f32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/int8_dot.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::random_bit_rows;
using test::random_vec;

constexpr auto& kInt8Types = test::kQuantTypes;
// Super-block rows come in groups of 8 activation blocks.
bool k_quant(TensorType t) { return is_super_block_type(t); }

TEST(Int8Dot, EveryQuantizedTypeHasTheIntegerPath) {
  for (TensorType t : test::kAllTypes) {
    EXPECT_EQ(has_int8_dot(t), tensor_type_info(t).block_elems > 1) << tensor_type_name(t);
  }
}

TEST(Int8Dot, QuantizedActivationsRoundTripWithinHalfAStep) {
  auto x = random_vec(32 * 7, 3, -4.f, 4.f);
  for (int i = 32; i < 64; ++i) x[i] = 0.f;  // an all-zero block gets d = 0, q = 0
  std::vector<Q8Block> q(7);
  quantize_q8_blocks(x.data(), q.data(), 32 * 7);
  EXPECT_EQ(q[1].d, 0.f);
  for (int b = 0; b < 7; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    EXPECT_FLOAT_EQ(q[b].d, amax / 127.f);
    int max_q = 0;
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(q[b].d * q[b].q[i] - x[b * 32 + i]), 0.5f * q[b].d * (1 + 1e-5f) + 1e-7f);
      max_q = std::max(max_q, std::abs(int(q[b].q[i])));
    }
    EXPECT_EQ(max_q, b == 1 ? 0 : 127);
  }
}

TEST(Int8Dot, ScalarMatchesDoubleOfTheSameIntegers) {
  for (TensorType type : kInt8Types) {
    for (int64_t n_blocks : {1, 2, 5, 8, 24, 64}) {
      if (k_quant(type) && n_blocks % 8 != 0) continue;
      const int64_t n = 32 * n_blocks;
      auto w = make_weight(type, n, 1, static_cast<uint32_t>(n + int(type)));
      auto x = random_vec(static_cast<size_t>(n), static_cast<uint32_t>(n * 3));
      std::vector<Q8Block> q(static_cast<size_t>(n_blocks));
      quantize_q8_blocks(x.data(), q.data(), n);
      std::vector<float> wf(static_cast<size_t>(n));
      dequantize_row(type, w.bytes.data(), wf.data(), n);
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double p = double(wf[i]) * double(q[i / 32].d) * double(q[i / 32].q[i % 32]);
        ref += p;
        mag += std::fabs(p);
      }
      EXPECT_NEAR(dot_int8(type, w.bytes.data(), q.data(), n_blocks), ref, 1e-6 * (1 + mag))
          << tensor_type_name(type) << " n=" << n;
    }
  }
}

TEST(Int8Dot, AvxKernelsAreBitIdenticalToScalar) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this machine: only the scalar path exists";
  auto x = random_vec(32 * 40, 11, -3.f, 3.f);
  x[5] = 0.5f * (x[0] + x[1]);  // arbitrary values incl. exact ties are rounded the same way
  std::vector<Q8Block> a(40), b(40);
  quantize_q8_blocks(x.data(), a.data(), 32 * 40);
  avx2::quantize_q8_blocks(x.data(), b.data(), 32 * 40);
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(Q8Block) * 40));
  for (const auto [type, n_blocks] : test::int8_row_cases()) {
    const int64_t n = 32 * n_blocks;
    // Scratch or none: batches of kInt8UnpackMinTokens or more take the unpacked-tile path only
    // with enough scratch; both must give the reference's bits. Tokens 2-16 take the fused groups
    // (Q8_0, Q4_0) whatever the scratch, 17 the unpacked ones again.
    std::vector<std::byte> scratch(avx2::int8_unpack_scratch_bytes(type, n_blocks) + 7);
    for (const std::span<std::byte> tile_scratch : {std::span<std::byte>(), std::span<std::byte>(scratch).subspan(7)})
      for (int64_t n_rows : {1, 3, 4, 9, 12, 16, 17, 33}) {
        for (int64_t n_tok : {1, 2, 3, 4, 5, 8, 11, 16, 17}) {
          // Quantizer-written rows, and (odd token counts) arbitrary bits: every scale and min field.
          const uint32_t seed = static_cast<uint32_t>(n_rows * 13 + n_tok);
          auto w = make_weight(type, n, n_rows, seed);
          if (n_tok % 2 == 1) w.bytes = random_bit_rows(type, n, n_rows, seed);
          auto xt = random_vec(static_cast<size_t>(n * n_tok), static_cast<uint32_t>(n_tok));
          std::vector<Q8Block> q(static_cast<size_t>(n_blocks * n_tok));
          for (int64_t t = 0; t < n_tok; ++t) quantize_q8_blocks(xt.data() + t * n, q.data() + t * n_blocks, n);
          std::vector<float> y(static_cast<size_t>(n_rows * n_tok));
          avx2::matmul_int8(type, w.bytes.data(), w.view.row_bytes(), n_rows, q.data(), n_blocks, n_tok, n_blocks,
                            y.data(), n_rows, tile_scratch);
          for (int64_t t = 0; t < n_tok; ++t) {
            for (int64_t r = 0; r < n_rows; ++r) {
              const float ref =
                  dot_int8(type, w.bytes.data() + r * w.view.row_bytes(), q.data() + t * n_blocks, n_blocks);
              ASSERT_EQ(0, std::memcmp(&ref, &y[t * n_rows + r], sizeof(float)))
                  << tensor_type_name(type) << " rows=" << n_rows << " tok=" << n_tok << " r=" << r << " t=" << t
                  << " scratch=" << tile_scratch.size();
            }
          }
        }
      }
  }
}

// The matmul entry point on the Q8 path: every ISA gives the same bits (and the same as the
// scalar reference dot), for any batch composition, thread count and token count, including
// batches longer than the kernel's 64-token block. Against exact f32, the error is the
// activations' rounding: each product's relative error is at most half a step (d/2 out of
// |x| <= 127 d), so |y - exact| <= sum |w_i| d_i / 2.
TEST(Int8Matmul, EveryPathIsBitIdenticalAndInvariant) {
  ThreadPool pool2(2), pool3(3);
  for (TensorType type : kInt8Types) {
    for (int64_t n_in : {32, 96, 256, 768, 2048}) {
      if (k_quant(type) != (n_in % 256 == 0)) continue;
      for (int64_t n_out : {1, 7, 37}) {
        for (int64_t n_tok : {1, 3, 70}) {
          if (n_in == 2048 && n_tok == 70 && n_out == 37) continue;  // keep the test quick
          auto w = make_weight(type, n_in, n_out, static_cast<uint32_t>(n_in + n_out));
          auto x = random_vec(static_cast<size_t>(n_tok * n_in), static_cast<uint32_t>(n_tok + 5 * n_in));
          std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 3)));
          std::vector<Q8Block> act(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
          const std::string where = std::string(tensor_type_name(type)) + " n_in=" + std::to_string(n_in) +
                                    " n_out=" + std::to_string(n_out) + " n_tok=" + std::to_string(n_tok);
          std::vector<float> y_ref(static_cast<size_t>(n_tok * n_out));
          matmul(w.view, x, y_ref, n_tok, scratch, nullptr, Isa::Scalar, Activations::Q8, act);
          for (Isa isa : supported_isas()) {
            std::vector<float> y(y_ref.size()), y3(y_ref.size());
            matmul(w.view, x, y, n_tok, scratch, &pool2, isa, Activations::Q8, act);
            ASSERT_EQ(0, std::memcmp(y.data(), y_ref.data(), sizeof(float) * y.size()))
                << where << " " << isa_name(isa);
            matmul(w.view, x, y3, n_tok, scratch, &pool3, isa, Activations::Q8, act);
            ASSERT_EQ(0, std::memcmp(y3.data(), y_ref.data(), sizeof(float) * y.size())) << where << " 3 threads";
            const int64_t t = n_tok - 1;
            std::vector<float> y1(static_cast<size_t>(n_out));
            matmul(w.view, std::span<const float>(x).subspan(t * n_in, n_in), y1, 1, scratch, nullptr, isa,
                   Activations::Q8, act);
            ASSERT_EQ(0, std::memcmp(y1.data(), y_ref.data() + t * n_out, sizeof(float) * n_out)) << where << " alone";
          }
          std::vector<float> deq(static_cast<size_t>(n_in * n_out));
          dequantize_row(type, w.bytes.data(), deq.data(), n_in * n_out);
          std::vector<Q8Block> q(static_cast<size_t>(n_in / 32));
          for (int64_t t = 0; t < n_tok; ++t) {
            quantize_q8_blocks(x.data() + t * n_in, q.data(), n_in);
            for (int64_t r = 0; r < n_out; ++r) {
              double exact = 0, bound = 0;
              for (int64_t i = 0; i < n_in; ++i) {
                exact += double(deq[r * n_in + i]) * double(x[t * n_in + i]);
                bound += std::fabs(double(deq[r * n_in + i])) * q[i / 32].d / 2;
              }
              ASSERT_NEAR(y_ref[t * n_out + r], exact, bound * 1.001 + 1e-5) << where;
            }
          }
        }
      }
    }
  }
}

// A K-quant row whose length is not whole super-blocks is refused, not truncated to them (the
// view's own size arithmetic throws first; matmul checks the block length again).
TEST(Int8Matmul, RejectsPartialKQuantSuperBlocks) {
  auto w = make_weight(TensorType::Q4_K, 512, 2, 3);
  w.view.shape = {288, 2};  // 9 blocks of 32: one super-block and a piece of the next
  std::vector<float> x(288), y(2), scratch(288);
  std::vector<Q8Block> act(9);
  EXPECT_THROW(matmul(w.view, x, y, 1, scratch, nullptr, Isa::Scalar, Activations::Q8, act), std::invalid_argument);
}

TEST(Int8Matmul, RejectsShortScratch) {
  auto w = make_weight(TensorType::Q8_0, 64, 3, 1);
  std::vector<float> x(128), y(6), scratch(64);
  std::vector<Q8Block> act(3);  // needs 4
  EXPECT_THROW(matmul(w.view, x, y, 2, scratch, nullptr, Isa::Scalar, Activations::Q8, act), std::invalid_argument);
}

}  // namespace
}  // namespace peregrine
