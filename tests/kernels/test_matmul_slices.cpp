// Weight slices for tensor parallelism: TensorView::rows / columns are zero-copy views, and the
// matmul of each row slice is, bit for bit, its part of the whole matmul; a column slice (rows
// read with the whole matrix's stride) multiplies exactly as a packed copy of those columns.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu_context.h"
#include "kernel_test_util.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::random_vec;

constexpr int64_t kIn = 512, kOut = 37;  // 512: two Q4_K/Q6_K super-blocks; 37 rows: ragged cuts

std::vector<float> run(CpuContext& ctx, const TensorView& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n * w.n_rows()));
  ctx.matmul(w, x, y, n);
  return y;
}

TEST(MatmulSlices, RowSlicesConcatenateToTheWholeMatmulBitForBit) {
  for (Activations act : {Activations::Q8, Activations::F32}) {
    for (Isa isa : supported_isas()) {
      CpuContext ctx(2, act, isa);
      for (TensorType type : test::kAllTypes) {
        const auto w = make_weight(type, kIn, kOut, 11);
        for (int64_t n : {1, 3, 17}) {
          const auto x = random_vec(static_cast<size_t>(n * kIn), 5);
          const auto whole = run(ctx, w.view, x, n);
          for (int64_t cut : {1, 16, 20, 36}) {
            const auto top = run(ctx, w.view.rows(0, cut), x, n);
            const auto bottom = run(ctx, w.view.rows(cut, kOut), x, n);
            for (int64_t t = 0; t < n; ++t) {
              EXPECT_EQ(0, std::memcmp(&whole[static_cast<size_t>(t * kOut)], &top[static_cast<size_t>(t * cut)],
                                       sizeof(float) * static_cast<size_t>(cut)))
                  << tensor_type_name(type) << " " << isa_name(isa) << " n " << n << " cut " << cut;
              EXPECT_EQ(0, std::memcmp(&whole[static_cast<size_t>(t * kOut + cut)],
                                       &bottom[static_cast<size_t>(t * (kOut - cut))],
                                       sizeof(float) * static_cast<size_t>(kOut - cut)))
                  << tensor_type_name(type) << " " << isa_name(isa) << " n " << n << " cut " << cut;
            }
          }
        }
      }
    }
  }
}

TEST(MatmulSlices, ColumnSliceMultipliesAsAPackedCopyOfItsColumns) {
  for (Isa isa : supported_isas()) {
    CpuContext ctx(2, Activations::Q8, isa);
    for (TensorType type : test::kAllTypes) {
      const int64_t block = tensor_type_info(type).block_elems;
      const int64_t c0 = block == 1 ? 64 : block, c1 = kIn;  // the second half (or more) of each row
      const auto w = make_weight(type, kIn, kOut, 12);
      const TensorView slice = w.view.columns(c0, c1);
      ASSERT_EQ(slice.row_length(), c1 - c0);
      ASSERT_EQ(slice.n_rows(), kOut);
      // The same columns packed contiguously.
      std::vector<std::byte> packed(tensor_bytes(type, (c1 - c0) * kOut));
      const size_t slice_row = tensor_bytes(type, c1 - c0);
      for (int64_t r = 0; r < kOut; ++r) std::memcpy(&packed[static_cast<size_t>(r) * slice_row], slice.row(r), slice_row);
      TensorView copy = slice;
      copy.row_stride = 0;
      copy.data = packed;
      for (int64_t n : {1, 5, 17}) {
        const auto x = random_vec(static_cast<size_t>(n * (c1 - c0)), 6);
        const auto a = run(ctx, slice, x, n), b = run(ctx, copy, x, n);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()))
            << tensor_type_name(type) << " " << isa_name(isa) << " n " << n;
      }
    }
  }
}

TEST(MatmulSlices, SlicesOutOfRangeOrInsideABlockAreRefused) {
  const auto w = make_weight(TensorType::Q4_K, kIn, kOut, 13);
  EXPECT_THROW(w.view.rows(0, kOut + 1), std::out_of_range);
  EXPECT_THROW(w.view.rows(5, 5), std::out_of_range);
  EXPECT_THROW(w.view.columns(0, kIn + 256), std::out_of_range);
  EXPECT_THROW(w.view.columns(32, 256), std::invalid_argument);  // Q4_K blocks are 256 wide
  EXPECT_NO_THROW(w.view.columns(256, 512));
}

}  // namespace
}  // namespace peregrine
