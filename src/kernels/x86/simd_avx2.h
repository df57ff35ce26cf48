#pragma once
// AVX2+FMA(+F16C) kernels (simd_avx2.cpp; the integer ones in simd_avx2_int8.cpp for Q8_0/Q4_0,
// simd_avx2_int8_k.cpp for Q4_K/Q5_K/Q6_K and simd_avx2_int8_tiles.cpp for Q4_1, Q5_0, Q5_1,
// IQ4_NL, Q2_K, Q3_K, IQ4_XS; all compiled with -mavx2 -mfma -mf16c). Call only when
// isa_supported(Isa::Avx2). Internal to kernels/: use matmul.h.
//
// Reduction order of every AVX2 dot product, whatever the weight type (this is what makes the
// fused decode kernels bit-identical to dequantize-then-dot, and every output independent of the
// batch): elements [32s, 32s+32) go to four 8-lane accumulators a0..a3 (a0 takes +0..7, a1
// +8..15, ...) by fused multiply-add, in order of s; then each remaining full group of 8 into a0;
// then sum = hsum((a0 + a1) + (a2 + a3)) with a fixed lane tree, then the last n % 8 elements in
// order, each by a fused multiply-add into the sum (the float GEMM's tail too).
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/tensor_type.h"
#include "kernels/int8_dot.h"
#include "kernels/ops.h"

namespace peregrine::avx2 {

// a, b: [n]
float dot_f32(const float* a, const float* b, int64_t n);

// Whether dequantize_row / dot_row have an AVX2 version for `type` (F32, F16, BF16, Q8_0, Q4_0).
bool has_fused(TensorType type);

// dst: [n] = the exact values format's dequantize_row produces (AVX2 decoders for F16, BF16,
// Q8_0, Q4_0, Q4_K, Q6_K; others fall back to it). n a multiple of the block size.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// dot(dequantized row, x) without materializing the row; bit-identical to
// dot_f32(dequantized row, x). row: one row of `type` with n elements, x: [n]. has_fused(type).
float dot_row(TensorType type, const void* row, const float* x, int64_t n);

// Float-weight GEMM (F32, F16, BF16) straight from the packed rows, register-blocked; its own
// reduction order (one 8-lane accumulator per output, see simd_avx2.cpp) for every batch size.
bool has_float_gemm(TensorType type);
// y[t * y_stride + r] = dot(row r, token t) for r < n_rows, t < n_tokens.
// rows: n_rows rows of row_bytes holding n elements of `type`; x: n_tokens rows of x_stride floats.
void matmul_float(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t n, float* y, int64_t y_stride);

// y[i] += w * v[i]. y, v: [n]
void axpy(float w, const float* v, float* y, int64_t n);

// y[i] *= s. y: [n]
void scale(float s, float* y, int64_t n);

// out[i] = act(gate[i]) * up[i] (ops.h apply_glu) with a vector exp (relative error below 2e-7;
// every element through the same code, tail included). gate, up, out: [n] (out may alias).
void glu(Glu kind, const float* gate, const float* up, float* out, int64_t n);

// Attention helpers (kernels/attention.cpp).
// s[i] *= scale (elementwise: scalar's bits); returns the largest new s[i], -inf when n == 0. s: [n]
float scale_max(float* s, float scale, int64_t n);
// sum_i exp(x[i] - m): the vector exp per term (-inf terms give 0), eight float lanes widened and
// summed in two 4-lane double accumulators, then the tail. x: [n], every x[i] <= m or -inf.
double sum_exp(const float* x, float m, int64_t n);
// s[i] = exp(s[i] - m), returns the sum of the new s[i] (eight lanes, then hsum, then the
// tail in order). Vector exp: relative error below 2e-7 (about 2 ulp); arguments below -87 give
// ~1e-38 instead of underflowing. s: [n], every s[i] <= m.
float exp_shifted(float* s, float m, int64_t n);
// y[c] += sum_i w[i] * rows[i][c], one fused multiply-add per term in order of i (the bits of
// n axpy calls). w: [n], rows: n pointers to [hd] floats, y: [hd].
void accumulate_rows(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd);

}  // namespace peregrine::avx2

namespace peregrine::avx2 {
// 10 independent 8-lane FMA chains run `iters` times (160 flops per iteration): enough chains to
// cover FMA latency on two pipes. Returns a value derived from the chains so none is elided.
float fma_peak_loop(int64_t iters);
// 8 independent chains of the integer dot step (vpmaddubsw, vpmaddwd, vpaddd: 32 byte
// multiply-adds each) run `iters` times. Returns a value derived from the chains.
int64_t int8_peak_loop(int64_t iters);
}  // namespace peregrine::avx2

namespace peregrine::avx2 {
// Integer path (int8_dot.h; bit-identical to its scalar reference).
// x: [n], n a multiple of 32; out: [n / 32].
void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n);
// Batches of at least this many tokens unpack each group of 8 rows once into scratch (when
// given int8_unpack_scratch_bytes of it), interleaved so one instruction multiplies 8 rows
// (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; the other types run the packed tiles for every batch).
inline constexpr int64_t kInt8UnpackMinTokens = 4;
// Q8_0 / Q4_0 batches of int8_few_min_tokens(type)..kInt8FewMaxTokens tokens take the fused group
// kernel instead: the 8 rows are interleaved a few blocks at a time into a buffer in L1 and dotted
// with every token there, straight from the rows as they stream in (no group scratch). Below the
// minimum the packed tiles measured faster (weights streaming from DRAM; Q8_0's sign trick costs
// more per token in the group layout than Q4_0's unsigned nibbles).
inline constexpr int64_t int8_few_min_tokens(TensorType type) { return type == TensorType::Q8_0 ? 4 : 3; }
inline constexpr int64_t kInt8FewMaxTokens = 16;
// Scratch bytes matmul_int8 uses to unpack a tile of rows with n_blocks blocks.
size_t int8_unpack_scratch_bytes(TensorType type, int64_t n_blocks);
// y[t * y_stride + r] = dot_int8(row r, token t) for r < n_rows, t < n_tokens.
// rows: n_rows rows of row_bytes (a has_int8_dot type; n_blocks blocks of 32 each, a multiple of 8
// for the super-block types);
// x: n_tokens tokens of x_stride blocks (the first n_blocks used); y: see above.
// scratch: this thread's; smaller than int8_unpack_scratch_bytes (or empty) = no unpacking
// (same bits, slower for batches).
void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                 std::span<std::byte> scratch);
}  // namespace peregrine::avx2

namespace peregrine::avx2 {
// The KV cache's Q8_0 rows (kv/kv_q8.h): dst[i] = f16 scales[i / 32] * q[i], the same bits as
// dequantize_kv_q8_row. q: [n], scales: [n / group], dst: [n]; n a multiple of group.
void dequantize_kv_q8_row(const int8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group = 32);
// The KV cache's FP8_E4M3 rows (kv/kv_fp8.h), the same bits as dequantize_kv_fp8_row: each code
// widened to an f16 worth code / 256 (E4M3's bits shifted into f16's fields, subnormals
// included), converted and multiplied by 256 * scale. codes: [n], dst: [n].
void dequantize_kv_fp8_row(const uint8_t* codes, uint16_t scale, float* dst, int64_t n);
// The KV cache's Q4_0 rows (kv/kv_q4.h), the same bits as dequantize_kv_q4_row.
// q: [n / 2], scales: [n / group], dst: [n]; n a multiple of group (other groups than 32 take
// the scalar code).
void dequantize_kv_q4_row(const uint8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group = 32);
}  // namespace peregrine::avx2

namespace peregrine::avx2 {
// KernelTable::tile_scores on the float GEMM (k rows as F32 weights, q rows as tokens).
void tile_scores(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                 int64_t s_stride);
}  // namespace peregrine::avx2
