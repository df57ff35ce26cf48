#pragma once
// AVX512-BF16 kernels (simd_avx512_bf16.cpp, compiled with the AVX-512 flags plus -mavx512bf16).
// Call only when cpu_has_avx512_bf16(). Internal to kernels/: use matmul.h.
//
// The bf16 product of F16/BF16 weights and activations rounded to bf16 (Activations::Q8 on such a
// CPU; docs/design/kernels.md). Its order, per output: ONE 16-lane f32 accumulator a (lane j
// starts at +0); for each chunk c of 32 elements (the last one padded with zeros), one vdpbf16ps:
// a[j] += w[32c + 2j + 1] * x[32c + 2j + 1], then a[j] += w[32c + 2j] * x[32c + 2j], each addition
// rounded to f32 (the products of two bf16 are exact in f32), denormal inputs and results flushed
// to zero; then hsum16's tree (simd_avx512.h). The same operations for every tile shape, batch
// size and row split, so results do not depend on the batch or the threads.
// F16 weights widen exactly to f32 and round to bf16 (nearest even) as they are read, the bits
// that converting them once at load gives.
//
// matmul_bf16_groups, on the same matrices packed at load (kernels/bf16_pack.h), has another
// order, the packed order, per output: ONE f32 chain from +0 over the element pairs in order;
// pair p (elements 2p, 2p + 1; element n of an odd n is 0) adds w[2p + 1] * x[2p + 1], then
// w[2p] * x[2p], each addition rounded to f32 with denormals flushed as above. No horizontal sum:
// lane j of a group's accumulator is row j's output. Again the same for every tile shape, batch
// size and row split. A matrix is read packed for every call or never, so a token's bits never
// depend on the batch.
#include <cstddef>
#include <cstdint>

#include "format/tensor_type.h"

namespace peregrine::avx512 {

// dst[i] = x[i] rounded to bf16 (vcvtneps2bf16: nearest even, denormals to zero, NaN quieted).
void round_to_bf16(const float* x, uint16_t* dst, int64_t n);

// y[t * y_stride + r] = the bf16 dot(row r, token t) for r < n_rows, t < n_tokens, in the order
// above. rows: n_rows rows of row_bytes, each n elements of `type` (F16 or BF16);
// x: n_tokens rows of x_stride bf16 values (n used).
void matmul_bf16(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const uint16_t* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n, float* y, int64_t y_stride);

// y[t * y_stride + r - r0] = the packed-order dot(row r, token t) for r0 <= r < r1, t < n_tokens.
// groups: a whole matrix packed by pack_bf16_groups (rows of n elements); r0 a multiple of 16;
// x: n_tokens rows of x_stride bf16 values (n used).
void matmul_bf16_groups(const void* groups, int64_t r0, int64_t r1, const uint16_t* x, int64_t x_stride,
                        int64_t n_tokens, int64_t n, float* y, int64_t y_stride);

// 12 independent chains of vdpbf16ps on zmm (32 multiply-adds each) run `iters` times.
float bf16_peak_loop(int64_t iters);

}  // namespace peregrine::avx512
