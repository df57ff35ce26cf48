// The bf16 path (F16/BF16 weights under Activations::Q8 on a CPU with AVX512-BF16) against its
// plain scalar mirror (bf16_mirrors.h), bit for bit: ragged rows and columns (not multiples of the
// 8-row and 4-row tiles or of 32 elements), 1 to 70 tokens (every tile shape and the token
// blocks), 1 to 3 threads; so every token gets the same bits whatever the batch and the threads.
// Skipped where the CPU lacks AVX512-BF16 (those CPUs keep the f32 path, tested elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bf16_mirrors.h"
#include "kernel_test_util.h"
#include "kernels/isa.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::random_vec;

bool have_bf16() { return isa_supported(Isa::Avx512) && uses_bf16_dot(TensorType::BF16, Isa::Avx512, Activations::Q8); }

#define SKIP_WITHOUT_BF16() \
  if (!have_bf16()) GTEST_SKIP() << "skipped: this CPU lacks AVX512-BF16 (or PEREGRINE_BF16=0)"

// The mirror's y for every token and row: activations rounded to bf16, then mirror_bf16_dot.
std::vector<float> mirror_matmul(const TensorView& w, const std::vector<float>& x, int64_t n_tok) {
  const int64_t n = w.row_length(), rows = w.n_rows();
  std::vector<float> y(static_cast<size_t>(n_tok * rows));
  std::vector<uint16_t> xb(static_cast<size_t>(n));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t i = 0; i < n; ++i)
      xb[static_cast<size_t>(i)] = test::mirror_round_bf16(x[static_cast<size_t>(t * n + i)]);
    for (int64_t r = 0; r < rows; ++r) {
      y[static_cast<size_t>(t * rows + r)] = test::mirror_bf16_dot(w.type, w.row(r), xb.data(), n);
    }
  }
  return y;
}

std::vector<float> run_matmul(const TensorView& w, const std::vector<float>& x, int64_t n_tok, ThreadPool* pool) {
  const int64_t n_in = w.row_length(), threads = pool ? pool->size() : 1;
  std::vector<float> y(static_cast<size_t>(n_tok * w.n_rows()), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, threads)));
  std::vector<Q8Block> act(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
  matmul(w, x, y, n_tok, scratch, pool, Isa::Avx512, Activations::Q8, act);
  return y;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
  }
}

TEST(Bf16Gemm, RoundingMatchesMirror) {
  SKIP_WITHOUT_BF16();
  std::vector<float> x = random_vec(1000, 3, -10.f, 10.f);
  // Halfway cases, denormals, infinities, NaN, the largest finite values.
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00001u,
                        0x7F7FFFFFu, 0xFF7FFFFFu, 0x80000000u, 0x00800000u}) {
    x.push_back(std::bit_cast<float>(bits));
  }
  for (size_t n : {x.size(), size_t{7}, size_t{16}, size_t{33}}) {
    std::vector<uint16_t> got(n, 0xAAAA);
    kernel_table(Isa::Avx512).round_bf16(x.data() + x.size() - n, got.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], test::mirror_round_bf16(x[x.size() - n + i])) << "element " << i;
    }
  }
}

TEST(Bf16Gemm, MatchesMirrorForRaggedShapesBatchesAndThreads) {
  SKIP_WITHOUT_BF16();
  ThreadPool pool2(2), pool3(3);
  struct Shape {
    int64_t n_in, n_out;
  };
  for (TensorType type : {TensorType::BF16, TensorType::F16}) {
    for (Shape s : {Shape{64, 8}, Shape{40, 19}, Shape{333, 37}, Shape{2065, 45}, Shape{7, 3}}) {
      const test::Weight w = make_weight(type, s.n_in, s.n_out, static_cast<uint32_t>(s.n_in + s.n_out));
      for (int64_t n_tok : {1, 2, 3, 5, 6, 7, 13, 70}) {
        const auto x = random_vec(static_cast<size_t>(n_tok * s.n_in), static_cast<uint32_t>(n_tok), -2.f, 2.f);
        const auto want = mirror_matmul(w.view, x, n_tok);
        SCOPED_TRACE(std::string(tensor_type_name(type)) + " " + std::to_string(s.n_in) + "x" +
                     std::to_string(s.n_out) + ", " + std::to_string(n_tok) + " tokens");
        expect_same_bits(run_matmul(w.view, x, n_tok, nullptr), want, "1 thread");
        expect_same_bits(run_matmul(w.view, x, n_tok, &pool2), want, "2 threads");
        expect_same_bits(run_matmul(w.view, x, n_tok, &pool3), want, "3 threads");
      }
    }
  }
}

// F16 rows converted to BF16 once (what a model does at load, Model::in_kernel_type) give the bits
// of the kernels converting them as they read.
TEST(Bf16Gemm, F16ConvertedOnceGivesTheSameBits) {
  SKIP_WITHOUT_BF16();
  const int64_t n_in = 300, n_out = 21, n_tok = 9;
  test::Weight f16 = make_weight(TensorType::F16, n_in, n_out, 77);
  test::Weight bf16 = f16;
  bf16.view.type = TensorType::BF16;
  bf16.view.data = bf16.bytes;
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t i = 0; i < n_in; ++i) {
      const uint16_t b = test::mirror_weight_bf16(TensorType::F16, f16.view.row(r), i);
      std::memcpy(bf16.bytes.data() + 2 * (r * n_in + i), &b, 2);
    }
  }
  const auto x = random_vec(static_cast<size_t>(n_tok * n_in), 5);
  ThreadPool pool(2);
  expect_same_bits(run_matmul(f16.view, x, n_tok, &pool), run_matmul(bf16.view, x, n_tok, &pool), "F16 vs BF16");
}

// Activations::F32 keeps the f32 path for 16-bit weights, and other weight types are untouched.
TEST(Bf16Gemm, OnlyQ8ActivationsOfSixteenBitWeightsTakeIt) {
  EXPECT_FALSE(uses_bf16_dot(TensorType::BF16, Isa::Avx512, Activations::F32));
  EXPECT_FALSE(uses_bf16_dot(TensorType::F32, Isa::Avx512, Activations::Q8));
  EXPECT_FALSE(uses_bf16_dot(TensorType::Q8_0, Isa::Avx512, Activations::Q8));
  EXPECT_FALSE(uses_bf16_dot(TensorType::F16, Isa::Avx2, Activations::Q8));
  EXPECT_FALSE(uses_bf16_dot(TensorType::F16, Isa::Scalar, Activations::Q8));
}

}  // namespace
}  // namespace peregrine
