// The bf16 path (F16/BF16 weights under Activations::Q8 on a CPU with AVX512-BF16) against its
// plain scalar mirrors (bf16_mirrors.h), bit for bit, for rows as stored and rows packed at load
// (bf16_pack.h): ragged rows and columns (not multiples of the tiles, of the 16-row groups or of
// 32 elements), 1 to 70 tokens (every tile shape and the token blocks), 1 to 3 threads; so every
// token gets the same bits whatever the batch and the threads.
// Skipped where the CPU lacks AVX512-BF16 (those CPUs keep the f32 path, tested elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bf16_mirrors.h"
#include "kernel_test_util.h"
#include "kernels/bf16_pack.h"
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

// The mirror's y for every token and row: activations rounded to bf16, then mirror_bf16_dot
// (mirror_bf16_dot_packed for a view with packed rows).
std::vector<float> mirror_matmul(const TensorView& w, const std::vector<float>& x, int64_t n_tok) {
  const auto dot = w.bf16_groups.empty() ? test::mirror_bf16_dot : test::mirror_bf16_dot_packed;
  const int64_t n = w.row_length(), rows = w.n_rows();
  std::vector<float> y(static_cast<size_t>(n_tok * rows));
  std::vector<uint16_t> xb(static_cast<size_t>(n));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t i = 0; i < n; ++i)
      xb[static_cast<size_t>(i)] = test::mirror_round_bf16(x[static_cast<size_t>(t * n + i)]);
    for (int64_t r = 0; r < rows; ++r) {
      y[static_cast<size_t>(t * rows + r)] = dot(w.type, w.row(r), xb.data(), n);
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

// A weight with its packed rows beside it, as Model::in_kernel_type leaves it.
struct PackedWeight {
  test::Weight w;
  std::vector<std::byte> groups;
};
PackedWeight make_packed(TensorType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  PackedWeight p{make_weight(type, n_in, n_out, seed), {}};
  p.groups.assign(bf16_groups_bytes(n_out, n_in), std::byte{0xAB});  // the packing writes every byte
  pack_bf16_groups(type, p.w.view.data.data(), p.w.view.stride_bytes(), n_out, n_in, p.groups.data());
  p.w.view.bf16_groups = p.groups;
  return p;
}

// The packed layout bf16_pack.h states: element i of row r in group r / 16, vector i / 2, lane
// r % 16, half i % 2; zeros past the last row and past an odd n; F16 rounded to bf16.
TEST(Bf16Gemm, PackedLayoutIsTheDocumentedOne) {
  for (TensorType type : {TensorType::BF16, TensorType::F16}) {
    const int64_t n = 7, rows = 19, np = 4;
    const PackedWeight p = make_packed(type, n, rows, 3);
    ASSERT_EQ(p.groups.size(), size_t{2 * np * 64});
    std::vector<uint16_t> h(p.groups.size() / 2);
    std::memcpy(h.data(), p.groups.data(), p.groups.size());
    for (int64_t r = 0; r < 32; ++r) {
      for (int64_t i = 0; i < 2 * np; ++i) {
        const uint16_t want = r < rows && i < n ? test::mirror_weight_bf16(type, p.w.view.row(r), i) : 0;
        EXPECT_EQ(h[static_cast<size_t>(((r / 16) * np + i / 2) * 32 + (r % 16) * 2 + i % 2)], want)
            << tensor_type_name(type) << " row " << r << " element " << i;
      }
    }
  }
}

// The packed rows against their mirror, bit for bit: rows not a multiple of 16 (the masked last
// group; 2-group and 4-group blocks with a remainder), n odd and not a multiple of 32, 1 to 70
// tokens (every tile width, the decode tiles), 1 to 3 threads.
TEST(Bf16Gemm, PackedMatchesMirrorForRaggedShapesBatchesAndThreads) {
  SKIP_WITHOUT_BF16();
  ThreadPool pool2(2), pool3(3);
  struct Shape {
    int64_t n_in, n_out;
  };
  for (TensorType type : {TensorType::BF16, TensorType::F16}) {
    for (Shape s : {Shape{64, 16}, Shape{40, 19}, Shape{333, 37}, Shape{2065, 45}, Shape{7, 3}, Shape{130, 113},
                    Shape{96, 160}}) {
      const PackedWeight p = make_packed(type, s.n_in, s.n_out, static_cast<uint32_t>(s.n_in * 7 + s.n_out));
      for (int64_t n_tok : {1, 2, 3, 5, 11, 12, 13, 25, 70}) {
        const auto x = random_vec(static_cast<size_t>(n_tok * s.n_in), static_cast<uint32_t>(n_tok + 1), -2.f, 2.f);
        const auto want = mirror_matmul(p.w.view, x, n_tok);
        SCOPED_TRACE(std::string(tensor_type_name(type)) + " " + std::to_string(s.n_in) + "x" +
                     std::to_string(s.n_out) + ", " + std::to_string(n_tok) + " tokens");
        expect_same_bits(run_matmul(p.w.view, x, n_tok, nullptr), want, "1 thread");
        expect_same_bits(run_matmul(p.w.view, x, n_tok, &pool2), want, "2 threads");
        expect_same_bits(run_matmul(p.w.view, x, n_tok, &pool3), want, "3 threads");
      }
    }
  }
}

// A group of packed and unpacked weights (the threads' chunks cross from one member to the next
// at rows that are not multiples of 16): each member gets its own order's bits.
TEST(Bf16Gemm, PackedAndUnpackedMembersOfOneGroup) {
  SKIP_WITHOUT_BF16();
  const int64_t n_in = 200, n_tok = 17;
  const PackedWeight a = make_packed(TensorType::BF16, n_in, 19, 11), c = make_packed(TensorType::F16, n_in, 333, 13);
  const test::Weight b = make_weight(TensorType::BF16, n_in, 45, 12);
  const auto x = random_vec(static_cast<size_t>(n_tok * n_in), 9, -2.f, 2.f);
  ThreadPool pool(2);
  std::vector<float> ya(19 * n_tok), yb(45 * n_tok), yc(333 * n_tok);
  const MatmulTarget targets[] = {{&a.w.view, ya}, {&b.view, yb}, {&c.w.view, yc}};
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 2)));
  std::vector<Q8Block> act(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
  matmul_group(targets, x, n_tok, scratch, &pool, Isa::Avx512, Activations::Q8, act);
  expect_same_bits(ya, mirror_matmul(a.w.view, x, n_tok), "packed BF16");
  expect_same_bits(yb, mirror_matmul(b.view, x, n_tok), "BF16 as stored");
  expect_same_bits(yc, mirror_matmul(c.w.view, x, n_tok), "packed F16");
}

// Slices drop the packed rows (they describe the whole matrix); a packed copy of the wrong size is
// refused rather than read past its end.
TEST(Bf16Gemm, SlicesDropPackedRowsAndAWrongSizeIsRefused) {
  PackedWeight p = make_packed(TensorType::BF16, 64, 40, 5);
  EXPECT_TRUE(p.w.view.rows(16, 32).bf16_groups.empty());
  EXPECT_TRUE(p.w.view.columns(0, 32).bf16_groups.empty());
  SKIP_WITHOUT_BF16();
  p.w.view.bf16_groups = std::span<const std::byte>(p.groups).first(p.groups.size() - 64);
  const auto x = random_vec(64 * 3, 2);
  EXPECT_THROW(run_matmul(p.w.view, x, 3, nullptr), std::invalid_argument);
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
