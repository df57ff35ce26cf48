// The interleaved kernel layouts (kernels/int8_layout.h) against the stored type's scalar
// reference: Q4_0_X16 and Q8_0_X16 matrices, made from quantizer-written and arbitrary-bit rows (row counts
// not a multiple of 16, odd block counts, rows read through a stride as a tensor-parallel slice's
// are), give dot_int8's bits for every token count, on the kernel directly and through matmul with
// its row split among threads. On a CPU without AVX-512 the kernel tests skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/int8_dot.h"
#include "kernels/int8_layout.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "kernels/x86/simd_avx512.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::quantized_tokens;
using test::random_bit_rows;
using test::random_vec;

constexpr TensorType kLayouts[] = {TensorType::Q4_0_X16, TensorType::Q8_0_X16};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(Int8Layout, KernelTypeOnlyOnTheAvx512PathUnderQ8) {
  const char* before = std::getenv("PEREGRINE_INT8_REPACK");  // restored at the end
  const std::string saved = before ? before : "";
  ::unsetenv("PEREGRINE_INT8_REPACK");
  EXPECT_EQ(int8_kernel_type(TensorType::Q4_0, Isa::Avx512, Activations::Q8), TensorType::Q4_0);  // opt-in
  ::setenv("PEREGRINE_INT8_REPACK", "1", 1);
  EXPECT_EQ(int8_kernel_type(TensorType::Q4_0, Isa::Avx2, Activations::Q8), TensorType::Q4_0);
  EXPECT_EQ(int8_kernel_type(TensorType::Q4_0, Isa::Avx512, Activations::F32), TensorType::Q4_0);
  EXPECT_EQ(int8_kernel_type(TensorType::Q4_K, Isa::Avx512, Activations::Q8), TensorType::Q4_K);
  EXPECT_EQ(int8_kernel_type(TensorType::Q8_0, Isa::Avx512, Activations::Q8),
            isa_supported(Isa::Avx512) ? TensorType::Q8_0_X16 : TensorType::Q8_0);
  EXPECT_EQ(int8_kernel_type(TensorType::Q4_0, Isa::Avx512, Activations::Q8),
            isa_supported(Isa::Avx512) ? TensorType::Q4_0_X16 : TensorType::Q4_0);
  if (before) {
    ::setenv("PEREGRINE_INT8_REPACK", saved.c_str(), 1);
  } else {
    ::unsetenv("PEREGRINE_INT8_REPACK");
  }
  EXPECT_FALSE(tensor_type_info(static_cast<uint32_t>(TensorType::Q4_0_X16)).has_value());  // never from a file
  EXPECT_FALSE(parse_tensor_type("q4_0_x16").has_value());
  EXPECT_EQ(interleaved_bytes(TensorType::Q4_0_X16, 17, 64), size_t{32} * 2 * 18);
  EXPECT_EQ(interleaved_bytes(TensorType::Q8_0_X16, 16, 96), size_t{16} * 3 * 34);
}

// The layout's bytes where int8_layout.h says they are: row r's quant dword c and scale.
TEST(Int8Layout, PlacesEveryRowsBytes) {
  for (TensorType layout : kLayouts) {
    const TensorType type = interleaved_source_type(layout);
    const int64_t n_blocks = 3, n = 32 * n_blocks, n_rows = 19;
    const auto w = random_bit_rows(type, n, n_rows, 5);
    const size_t row_bytes = tensor_bytes(type, n), src_block = row_bytes / n_blocks, quant = src_block - 2;
    const size_t block = interleaved_block_bytes(layout);
    ASSERT_EQ(block, 16 * src_block);
    std::vector<std::byte> out(interleaved_bytes(layout, n_rows, n), std::byte{0x55});
    interleave_rows(layout, w.data(), row_bytes, n_rows, n, out.data());
    const std::vector<std::byte> zero(src_block);
    for (int64_t r = 0; r < 32; ++r) {
      for (int64_t b = 0; b < n_blocks; ++b) {
        const std::byte* blk = out.data() + (r / 16) * 16 * row_bytes + b * block;
        const std::byte* src = r < n_rows ? w.data() + r * row_bytes + b * src_block : zero.data();  // padding: 0
        ASSERT_EQ(0, std::memcmp(blk + 16 * quant + 2 * (r % 16), src, 2)) << "scale r=" << r << " b=" << b;
        for (size_t c = 0; c < quant / 4; ++c) {
          ASSERT_EQ(0, std::memcmp(blk + 64 * c + 4 * (r % 16), src + 2 + 4 * c, 4)) << "r=" << r << " c=" << c;
        }
      }
    }
  }
}

struct KernelCase {
  TensorType layout;
  int64_t n_blocks;
};
std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  for (TensorType layout : kLayouts) {
    for (int64_t n_blocks : {1, 3, 40, 41}) cases.push_back({layout, n_blocks});
  }
  return cases;
}

// Every ragged row and token count, with and without scratch (the fused few-token groups, the
// unpacked groups of batches, and the few-token groups over more than 16 tokens): dot_int8's bits.
TEST(Int8Layout, KernelBitIdenticalToScalarReference) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI path on this CPU";
  for (const auto [layout, n_blocks] : kernel_cases()) {
    const int64_t n = 32 * n_blocks;
    const TensorType type = interleaved_source_type(layout);
    const size_t row_bytes = tensor_bytes(type, n);
    std::vector<std::byte> scratch(avx512::int8_unpack_scratch_bytes(layout, n_blocks) + 7);
    for (bool random_bits : {false, true}) {
      for (int64_t n_rows : {1, 3, 15, 16, 17, 33, 48}) {
        const auto seed = static_cast<uint32_t>(n_rows * 13 + n_blocks);
        // Rows through a stride longer than a row (a tensor-parallel slice's), 5 bytes of gap.
        const size_t stride = row_bytes + 5;
        std::vector<std::byte> strided(stride * static_cast<size_t>(n_rows), std::byte{0x7f});
        const auto w = random_bits ? random_bit_rows(type, n, n_rows, seed) : make_weight(type, n, n_rows, seed).bytes;
        for (int64_t r = 0; r < n_rows; ++r) std::memcpy(&strided[r * stride], &w[r * row_bytes], row_bytes);
        std::vector<std::byte> x16(interleaved_bytes(layout, n_rows, n));
        interleave_rows(layout, strided.data(), stride, n_rows, n, x16.data());
        for (int64_t n_tok : {1, 2, 3, 4, 5, 6, 8, 9, 15, 16, 17, 24, 33, 64}) {
          const auto q = quantized_tokens(n_tok, n, static_cast<uint32_t>(n_tok + 1000 * n_rows));
          for (const std::span<std::byte> s : {std::span<std::byte>(), std::span<std::byte>(scratch).subspan(7)}) {
            std::vector<float> y(static_cast<size_t>(n_rows * n_tok), -1.f);
            avx512::matmul_int8(layout, x16.data(), row_bytes, n_rows, q.data(), n_blocks, n_tok, n_blocks, y.data(),
                                n_rows, s);
            for (int64_t t = 0; t < n_tok; ++t) {
              for (int64_t r = 0; r < n_rows; ++r) {
                const float ref = dot_int8(type, w.data() + r * row_bytes, q.data() + t * n_blocks, n_blocks);
                ASSERT_TRUE(same_bits(ref, y[t * n_rows + r]))
                    << tensor_type_name(layout) << " blocks=" << n_blocks << (random_bits ? " random bits" : "")
                    << " rows=" << n_rows << " tokens=" << n_tok << " r=" << r << " t=" << t << " scratch=" << s.size();
              }
            }
          }
        }
      }
    }
  }
}

// Through matmul: the row split among 1-3 threads (chunks start at groups) gives the Q4_0 view's
// bits for decode, few-token and batch calls.
TEST(Int8Layout, MatmulMatchesStoredTypeForAnySplit) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI path on this CPU";
  for (const auto [layout, n_rows] : {KernelCase{TensorType::Q4_0_X16, 7}, KernelCase{TensorType::Q4_0_X16, 100},
                                      KernelCase{TensorType::Q4_0_X16, 333}, KernelCase{TensorType::Q8_0_X16, 333}}) {
    const int64_t n = 32 * 9;
    const auto w = make_weight(interleaved_source_type(layout), n, n_rows, static_cast<uint32_t>(n_rows));
    std::vector<std::byte> x16(interleaved_bytes(layout, n_rows, n));
    interleave_rows(layout, w.bytes.data(), w.view.row_bytes(), n_rows, n, x16.data());
    TensorView v = w.view;
    v.type = layout;
    v.data = x16;
    for (int64_t n_tok : {1, 3, 16, 40}) {
      const auto x = random_vec(static_cast<size_t>(n_tok * n), static_cast<uint32_t>(n_tok));
      std::vector<Q8Block> act(static_cast<size_t>(act_scratch_blocks(n_tok, n)));
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n, threads)));
        std::vector<float> ref(static_cast<size_t>(n_tok * n_rows)), got(ref.size(), -1.f);
        matmul(w.view, x, ref, n_tok, scratch, &pool, Isa::Avx512, Activations::Q8, act);
        matmul(v, x, got, n_tok, scratch, &pool, Isa::Avx512, Activations::Q8, act);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_TRUE(same_bits(ref[i], got[i])) << tensor_type_name(layout) << " rows=" << n_rows
                                                 << " tokens=" << n_tok << " threads=" << threads << " i=" << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace peregrine
