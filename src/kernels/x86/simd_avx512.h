#pragma once
// AVX-512 kernels (simd_avx512*.cpp, compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni on
// top of the AVX2 flags). Call only when isa_supported(Isa::Avx512). Internal to kernels/: use
// matmul.h. The signatures mirror simd_avx2.h's; kernel_table.cpp's avx512 table takes what this
// path does not replace (dequantizers, the f32-activation dots of quantized rows, the KV row
// decoders, attention's softmax helpers) from the AVX2 kernels, which this CPU also runs.
//
// Float GEMM reduction order (matmul_float and tile_scores; it differs from AVX2's, so the two paths
// give different bits, each invariant in itself): per output, ONE 16-lane accumulator a (lane j
// starts at +0); lane j takes elements j, j + 16, j + 32, ... in order, each by one fused
// multiply-add a[j] = fma(w[i], x[i], a[j]) (the ragged last group too, in the lanes it fills;
// the others keep their value); then b[j] = a[j] + a[j + 8] for j < 8, and the result is
// ((b0 + b4) + (b2 + b6)) + ((b1 + b5) + (b3 + b7)). The same operations for every tile shape,
// batch size and row split.
//
// The integer path reproduces int8_dot.h's arithmetic and order exactly, like AVX2's. It has
// VNNI kernels of its own for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K; the other quantized types (Q4_1,
// Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS) run the AVX2 kernels (same bits, no VNNI speed-up).
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/tensor_type.h"
#include "kernels/int8_dot.h"

namespace peregrine::avx512 {

// Float-weight GEMM (F32, F16, BF16) straight from the packed rows, register-blocked (6 rows for
// one token, 4 rows x 6 tokens for batches), in the order above.
bool has_float_gemm(TensorType type);
// y[t * y_stride + r] = dot(row r, token t) for r < n_rows, t < n_tokens.
// rows: n_rows rows of row_bytes holding n elements of `type`; x: n_tokens rows of x_stride floats.
void matmul_float(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t n, float* y, int64_t y_stride);

// Integer path (int8_dot.h; bit-identical to its scalar reference).
// x: [n], n a multiple of 32; out: [n / 32]; the same bytes as the scalar quantize_q8_blocks.
void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n);
// Batches of at least this many tokens unpack each group of 16 rows once into scratch (when
// given int8_unpack_scratch_bytes of it), interleaved so one vpdpbusd multiplies 16 rows.
inline constexpr int64_t kInt8UnpackMinTokens = 4;
// Tokens per matmul_int8 call matmul hands over (KernelTable::int8_token_block): a group of 16
// rows is unpacked once per call and then dotted with every token of it (Q6_K: 64 at a time), so
// a 512-token prefill unpacks each weight once, not once per 64 tokens. The activations of the
// block (512 tokens of a 5632-long row: 3.6 MB) then come from L3, not L2, which the group
// kernel's 8 cycles per token and block hide (docs/performance-history.md, "Prefill against the int8
// roof").
inline constexpr int64_t kInt8TokenBlock = 512;
// Q8_0 / Q4_0 / Q4_K / Q5_K batches of int8_few_min_tokens(type)..kInt8FewMaxTokens tokens take
// the fused group kernels instead: each block of 16 rows is interleaved in registers and dotted
// with every token at once, straight from the rows as they stream in (no scratch, each weight
// byte read and unpacked once). Fewer tokens stay on the packed decode tiles: with the weights
// streaming from DRAM those measured as fast or faster at two tokens (three for Q8_0), though the
// fused groups are faster hot in cache (docs/performance-history.md, "Few-token int8 path").
inline constexpr int64_t int8_few_min_tokens(TensorType type) { return type == TensorType::Q8_0 ? 4 : 3; }
inline constexpr int64_t kInt8FewMaxTokens = 16;
// Scratch bytes matmul_int8 uses to unpack a group of rows with n_blocks blocks (and, for Q6_K,
// the activations' half-block sums of up to 64 tokens).
size_t int8_unpack_scratch_bytes(TensorType type, int64_t n_blocks);
// y[t * y_stride + r] = dot_int8(row r, token t) for r < n_rows, t < n_tokens.
// rows: n_rows rows of row_bytes (a has_int8_dot type, n_blocks blocks of 32 each);
// x: n_tokens tokens of x_stride blocks (the first n_blocks used); y: see above.
// scratch: this thread's; smaller than int8_unpack_scratch_bytes (or empty) = no unpacking
// (same bits, slower for batches).
void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                 std::span<std::byte> scratch);

// KernelTable::tile_scores on the float GEMM (k rows as F32 weights, q rows as tokens).
void tile_scores(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                 int64_t s_stride);

// KernelTable::accumulate_rows: y[c] += w[i] * rows[i][c], one fused multiply-add per term in order
// of i (the bits of AVX2's and of n axpy calls). w: [n], rows: n pointers to [hd], y: [hd].
void accumulate_rows(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd);

// Machine probes (machine_probe.cpp).
// 12 independent 16-lane FMA chains run `iters` times (384 flops per iteration).
float fma_peak_loop(int64_t iters);
// 12 independent chains of vpdpbusd on zmm (64 byte multiply-adds each) run `iters` times.
int64_t int8_peak_loop(int64_t iters);

}  // namespace peregrine::avx512
