// The avx512 kernel path (simd_avx512*.cpp) against plain references on random inputs with
// ragged shapes: the integer kernels and the activation quantizer bit-identical to the scalar
// reference (int8_dot.h defines that arithmetic), the float GEMM bit-identical to a scalar mirror
// of the order simd_avx512.h defines, and the matmul entry point invariant in the batch, the
// thread count and the row split. On a CPU without AVX-512 every test here skips, saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "float_order_mirrors.h"
#include "kernel_test_util.h"
#include "kernels/int8_dot.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/x86/simd_avx512.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::quantized_tokens;
using test::random_bit_rows;
using test::random_vec;

#define SKIP_WITHOUT_AVX512()                                                                                \
  if (!isa_supported(Isa::Avx512)) {                                                                         \
    GTEST_SKIP() << "this CPU cannot run the avx512 kernel path (it needs " << isa_requirements(Isa::Avx512) \
                 << "): only the scalar and AVX2 paths are tested here";                                     \
  }

// Every quantized type: Q8_0/Q4_0/Q4_K/Q6_K on this path's own kernels, the rest on AVX2's.
constexpr auto& kInt8Types = test::kQuantTypes;
constexpr TensorType kFloatTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16};
constexpr int64_t kRaggedRows[] = {1, 3, 4, 9, 12, 16, 17, 33};
constexpr int64_t kRaggedTokens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 64, 65, 130};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The scalar mirror of the avx512 float order (simd_avx512.h).
constexpr auto mirror_dot = test::avx512_order_dot;

TEST(IsaAvx512, QuantizeQ8BlocksGivesTheScalarBytes) {
  SKIP_WITHOUT_AVX512();
  const int64_t n = 32 * 40;
  auto x = random_vec(static_cast<size_t>(n), 11, -3.f, 3.f);
  x[5] = 0.5f * (x[0] + x[1]);
  for (int i = 64; i < 96; ++i) x[i] = 0.f;                                   // an all-zero block
  for (int i = 96; i < 128; ++i) x[i] = i == 100 ? -1e-30f : 0.f;             // one tiny value
  for (int i = 128; i < 160; ++i) x[i] = static_cast<float>(i - 144) * 0.5f;  // exact ties x.5
  for (int i = 160; i < 192; ++i) x[i] *= 1e6f;                               // large magnitudes
  std::vector<Q8Block> ref(40), got(40);
  quantize_q8_blocks(x.data(), ref.data(), n);
  avx512::quantize_q8_blocks(x.data(), got.data(), n);
  ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), sizeof(Q8Block) * 40));
  for (int seed = 0; seed < 20; ++seed) {
    const auto v = random_vec(static_cast<size_t>(n), 100 + seed, -100.f, 100.f);
    quantize_q8_blocks(v.data(), ref.data(), n);
    avx512::quantize_q8_blocks(v.data(), got.data(), n);
    ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), sizeof(Q8Block) * 40)) << "seed " << seed;
  }
}

// Every ragged row and token count, with and without unpacking scratch (the packed tiles, the
// fused few-token groups and the 16-row groups), on quantizer-written and arbitrary-bit weights:
// every output the reference's bits. 65 and 130 tokens cross Q6_K's 64-token chunks (the other
// types take them in one pass, a ragged last token tile).
// Rows of 40 blocks (not a multiple of 16 blocks; 5 K-quant super-blocks) and, for the 32-weight
// types, of an odd 41.
TEST(IsaAvx512, MatmulInt8BitIdenticalToScalarReference) {
  SKIP_WITHOUT_AVX512();
  for (const auto [type, n_blocks] : test::int8_row_cases()) {
    const int64_t n = 32 * n_blocks;
    const size_t row_bytes = tensor_bytes(type, n);
    std::vector<std::byte> scratch(avx512::int8_unpack_scratch_bytes(type, n_blocks) + 7);
    for (bool random_bits : {false, true}) {
      for (int64_t n_rows : kRaggedRows) {
        const uint32_t seed = static_cast<uint32_t>(n_rows * 13 + int(type));
        const auto w = random_bits ? random_bit_rows(type, n, n_rows, seed) : make_weight(type, n, n_rows, seed).bytes;
        for (int64_t n_tok : kRaggedTokens) {
          const auto q = quantized_tokens(n_tok, n, static_cast<uint32_t>(n_tok + 1000 * n_rows));
          for (const std::span<std::byte> tile_scratch :
               {std::span<std::byte>(), std::span<std::byte>(scratch).subspan(7)}) {
            std::vector<float> y(static_cast<size_t>(n_rows * n_tok), -1.f);
            avx512::matmul_int8(type, w.data(), row_bytes, n_rows, q.data(), n_blocks, n_tok, n_blocks, y.data(),
                                n_rows, tile_scratch);
            for (int64_t t = 0; t < n_tok; ++t) {
              for (int64_t r = 0; r < n_rows; ++r) {
                const float ref = dot_int8(type, w.data() + r * row_bytes, q.data() + t * n_blocks, n_blocks);
                ASSERT_TRUE(same_bits(ref, y[t * n_rows + r]))
                    << tensor_type_name(type) << (random_bits ? " random bits" : "") << " rows=" << n_rows
                    << " tokens=" << n_tok << " r=" << r << " t=" << t << " scratch=" << tile_scratch.size() << ": "
                    << ref << " vs " << y[t * n_rows + r];
              }
            }
          }
        }
      }
    }
  }
}

// The float GEMM against the scalar mirror of its documented order, on ragged row lengths (the
// masked last group), rows and tokens (every tile shape and the 30-token block).
TEST(IsaAvx512, FloatGemmFollowsItsDocumentedOrder) {
  SKIP_WITHOUT_AVX512();
  for (TensorType type : kFloatTypes) {
    for (int64_t n : {1, 5, 15, 16, 17, 33, 64, 100, 257}) {
      for (int64_t n_rows : kRaggedRows) {
        const auto w = make_weight(type, n, n_rows, static_cast<uint32_t>(n * 7 + n_rows));
        std::vector<float> deq(static_cast<size_t>(n * n_rows));  // exact: f16/bf16 widen exactly
        dequantize_row(type, w.bytes.data(), deq.data(), n * n_rows);
        for (int64_t n_tok : kRaggedTokens) {
          const auto x = random_vec(static_cast<size_t>(n_tok * n), static_cast<uint32_t>(n_tok + 31 * n));
          std::vector<float> y(static_cast<size_t>(n_rows * n_tok), -1.f);
          avx512::matmul_float(type, w.bytes.data(), w.view.row_bytes(), n_rows, x.data(), n, n_tok, n, y.data(),
                               n_rows);
          for (int64_t t = 0; t < n_tok; ++t) {
            for (int64_t r = 0; r < n_rows; ++r) {
              const float ref = mirror_dot(deq.data() + r * n, x.data() + t * n, n);
              ASSERT_TRUE(same_bits(ref, y[t * n_rows + r]))
                  << tensor_type_name(type) << " n=" << n << " rows=" << n_rows << " tokens=" << n_tok << " r=" << r
                  << " t=" << t << ": " << ref << " vs " << y[t * n_rows + r];
            }
          }
        }
      }
    }
  }
}

// Attention's score tiles (KernelTable::tile_scores) are the float GEMM on F32 rows: the
// mirror's bits too, for head dimensions on and off the 16-lane grid.
TEST(IsaAvx512, TileScoresFollowTheFloatOrder) {
  SKIP_WITHOUT_AVX512();
  for (int64_t hd : {4, 13, 64, 80, 128}) {
    for (int64_t n_keys : {1, 7, 32}) {
      const int64_t n_q = 5, stride = 32;
      const auto k = random_vec(static_cast<size_t>(n_keys * hd), static_cast<uint32_t>(hd + n_keys));
      const auto q = random_vec(static_cast<size_t>(n_q * hd), static_cast<uint32_t>(3 * hd));
      std::vector<float> s(static_cast<size_t>(n_q * stride), -1.f);
      avx512::tile_scores(k.data(), n_keys, q.data(), n_q, hd, s.data(), stride);
      for (int64_t j = 0; j < n_q; ++j) {
        for (int64_t i = 0; i < n_keys; ++i) {
          ASSERT_TRUE(same_bits(mirror_dot(&k[i * hd], &q[j * hd], hd), s[j * stride + i])) << hd << " " << i;
        }
      }
    }
  }
}

// The matmul entry point on the avx512 path, every weight type and both activation modes: the
// same bits for 1, 2 and 3 threads (other row splits), for each token alone and in batches of
// every size up to 70 (past the int8 kernels' 64-token block and the float GEMM's 30); float
// weights give the mirror's bits, integer weights the scalar reference path's.
TEST(IsaAvx512, MatmulIsBatchThreadAndSplitInvariant) {
  SKIP_WITHOUT_AVX512();
  ThreadPool pool2(2), pool3(3);
  const int64_t n_in = 512, n_out = 53, n_tok = 70;
  for (TensorType type : test::kAllTypes) {
    for (Activations act : {Activations::F32, Activations::Q8}) {
      if (act == Activations::Q8 && !has_int8_dot(type)) continue;
      const auto w = make_weight(type, n_in, n_out, static_cast<uint32_t>(int(type) + 77));
      const auto x = random_vec(static_cast<size_t>(n_tok * n_in), 123);
      std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 3)));
      std::vector<Q8Block> act_q8(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
      const std::string where = std::string(tensor_type_name(type)) + (act == Activations::Q8 ? " q8" : " f32");
      std::vector<float> y1(static_cast<size_t>(n_tok * n_out));
      matmul(w.view, x, y1, n_tok, scratch, nullptr, Isa::Avx512, act, act_q8);
      // The reference for this type: the mirror on the exact f32 rows, or the scalar path.
      std::vector<float> ref(y1.size());
      if (act == Activations::Q8) {
        matmul(w.view, x, ref, n_tok, scratch, nullptr, Isa::Scalar, act, act_q8);
      } else if (!has_int8_dot(type) || type == TensorType::Q4_K || type == TensorType::Q6_K) {
        std::vector<float> deq(static_cast<size_t>(n_in * n_out));
        dequantize_row(type, w.bytes.data(), deq.data(), n_in * n_out);
        for (int64_t t = 0; t < n_tok; ++t)
          for (int64_t r = 0; r < n_out; ++r) ref[t * n_out + r] = mirror_dot(&deq[r * n_in], &x[t * n_in], n_in);
      } else {
        ref = y1;  // Q8_0/Q4_0 with f32 activations take the AVX2 dots (tested in test_isa_paths.cpp)
      }
      ASSERT_EQ(0, std::memcmp(ref.data(), y1.data(), sizeof(float) * y1.size())) << where << " vs reference";
      for (ThreadPool* pool : {&pool2, &pool3}) {
        std::vector<float> y(y1.size());
        matmul(w.view, x, y, n_tok, scratch, pool, Isa::Avx512, act, act_q8);
        ASSERT_EQ(0, std::memcmp(y.data(), y1.data(), sizeof(float) * y.size())) << where << " " << pool->size();
      }
      for (int64_t batch : {1, 2, 5, 17, 33, 64}) {
        for (int64_t t0 = 0; t0 + batch <= n_tok; t0 += batch + 3) {
          std::vector<float> y(static_cast<size_t>(batch * n_out));
          matmul(w.view, std::span<const float>(x).subspan(t0 * n_in, batch * n_in), y, batch, scratch, &pool2,
                 Isa::Avx512, act, act_q8);
          ASSERT_EQ(0, std::memcmp(y.data(), y1.data() + t0 * n_out, sizeof(float) * y.size()))
              << where << " tokens " << t0 << ".." << t0 + batch;
        }
      }
    }
  }
}

// A prompt longer than the tokens matmul hands the int8 kernels per call (int8_token_block):
// every quantized type on two threads gives the scalar path's bits, on every token.
TEST(IsaAvx512, MatmulInt8PastTheTokenBlock) {
  SKIP_WITHOUT_AVX512();
  ThreadPool pool2(2);
  const int64_t n_in = 256, n_out = 37, n_tok = avx512::kInt8TokenBlock + 19;
  const auto x = random_vec(static_cast<size_t>(n_tok * n_in), 321);
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 2)));
  std::vector<Q8Block> act_q8(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
  for (TensorType type : kInt8Types) {
    const auto w = make_weight(type, n_in, n_out, static_cast<uint32_t>(int(type) + 5));
    std::vector<float> ref(static_cast<size_t>(n_tok * n_out)), y(ref.size());
    matmul(w.view, x, ref, n_tok, scratch, nullptr, Isa::Scalar, Activations::Q8, act_q8);
    matmul(w.view, x, y, n_tok, scratch, &pool2, Isa::Avx512, Activations::Q8, act_q8);
    ASSERT_EQ(0, std::memcmp(ref.data(), y.data(), sizeof(float) * y.size())) << tensor_type_name(type);
  }
}

}  // namespace
}  // namespace peregrine
