#pragma once
// Row-interleaved copies of quantized matrices, made once at load for the AVX-512 integer kernels
// (Model::in_kernel_type through ExecutionContext::matmul_weight_type). A file's rows put each
// row's blocks end to end, so a kernel that advances 16 rows at once reads 16 short streams and
// spends much of its work transposing them into vpdpbusd's layout; the interleaved copy stores
// exactly that layout, so decode reads one sequential stream per thread and skips the transpose.
// Same bytes, same arithmetic: the kernels reading it reproduce int8_dot.h's bits for the stored
// type.
//
// Made only with PEREGRINE_INT8_REPACK=1 (int8_kernel_type) for now: one thread streaming these
// from memory, 1-2 tokens per call run 1.2-1.5x the file layout's kernels, 3-4 about even, but
// 8-16 tokens 0.6-0.9x (x86/simd_avx512_int8.cpp, kX16FusedMaxTokens), so 16 sequences decoding
// and speculative verification would lose what decode gains until that is understood.
//
// Q4_0_X16 (from Q4_0) and Q8_0_X16 (from Q8_0): rows in groups of kInterleaveRows, the last group
// padded with zero rows (scale 0, quants 0: their outputs are never stored). Group g starts at
// byte g * kInterleaveRows * row_bytes; in it, block b is 16 source blocks' bytes at
// b * interleaved_block_bytes: first the quant chunks of 64 bytes, chunk c holding bytes
// 4c..4c+3 of each row's quant bytes (row r at 4r), then the 16 rows' f16 scales. Q4_0: 4 chunks
// (a row's 16 nibble bytes; chunk c's low nibbles are weights 4c..4c+3, its high ones
// 16+4c..16+4c+3); Q8_0: 8 chunks (a row's 32 signed bytes). Such a matrix is read only by the
// kernels: it has no rows to dequantize one at a time.
#include <cstddef>
#include <cstdint>

#include "format/tensor_type.h"

namespace peregrine {

inline constexpr int64_t kInterleaveRows = 16;

// Whether `type` is a kernel layout of this file (never found in a model file).
inline bool is_interleaved_type(TensorType type) {
  return type == TensorType::Q4_0_X16 || type == TensorType::Q8_0_X16;
}

// The stored type a layout was made from (Q4_0 for Q4_0_X16, Q8_0 for Q8_0_X16), or type itself.
TensorType interleaved_source_type(TensorType type);

// Bytes of one interleaved block: 16 source blocks (288 for Q4_0_X16, 544 for Q8_0_X16).
size_t interleaved_block_bytes(TensorType layout);

// Bytes of the interleaved copy of n_rows rows of n_in elements (whole groups).
size_t interleaved_bytes(TensorType layout, int64_t n_rows, int64_t n_in);

// out[interleaved_bytes] = the `layout` copy of n_rows rows of n_in elements of its source type,
// row r at rows + r * stride.
void interleave_rows(TensorType layout, const std::byte* rows, size_t stride, int64_t n_rows, int64_t n_in,
                     std::byte* out);

}  // namespace peregrine
