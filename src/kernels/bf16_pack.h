#pragma once
// The layout the bf16 GEMM reads 16-bit matrices in (x86/simd_avx512_bf16.h, matmul_bf16_groups),
// built once at load (Model::in_kernel_type) and kept beside the matrix (TensorView::bf16_groups).
//
// Rows in groups of kBf16GroupRows = 16, one group after another. A group is np = ceil(n / 2)
// 64-byte vectors, vector p holding elements 2p and 2p + 1 of the group's 16 rows: row j's pair
// in 32-bit lane j, element 2p in its low half. One load gives the kernel 16 rows x 2 elements,
// and a token's pair (2p, 2p + 1) broadcast to every lane multiplies all of them (vdpbf16ps), so
// each lane accumulates one output and no horizontal sum is needed. Padding: the rows of a last
// group past n_rows, and element n of an odd n, are zeros. F16 elements are rounded to bf16 here
// (widened exactly, nearest even: the bits the kernels' on-the-fly conversion gives).
#include <cstddef>
#include <cstdint>

#include "format/tensor_type.h"

namespace peregrine {

inline constexpr int64_t kBf16GroupRows = 16;

// Bytes of the packed form of n_rows rows of n elements.
size_t bf16_groups_bytes(int64_t n_rows, int64_t n);

// Packs n_rows rows (row r at rows + r * row_stride bytes: n elements of `type`, F16 or BF16) into
// out, bf16_groups_bytes(n_rows, n) bytes (64-byte aligned for the kernel's aligned loads).
void pack_bf16_groups(TensorType type, const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                      std::byte* out);

}  // namespace peregrine
