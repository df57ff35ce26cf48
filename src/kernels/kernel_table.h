#pragma once
// The one place that knows which kernel functions each instruction-set path provides. matmul.cpp
// and attention.cpp ask kernel_table(isa) once per call and never test the ISA themselves, so a
// new path (AVX-512, NEON, ...) is one new table in kernel_table.cpp plus its kernel files.
//
// Every function has the same meaning on every path; where a path's floating-point reduction
// order differs (the float dot products, the attention exp sum), its header says so and tests
// compare it with a scalar mirror of that order. The integer path (int8_dot.h) is bit-identical
// on every path. Optional entries are nullptr where a path has nothing faster than the generic
// code in matmul.cpp.
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/tensor_type.h"
#include "kernels/int8_dot.h"
#include "kernels/isa.h"
#include "kernels/ops.h"

namespace peregrine {

struct KernelTable {
  Isa isa = Isa::Scalar;

  // --- Float arithmetic.
  // a, b: [n]; the path's dot-product order.
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  // dst: [n] = the exact values format's dequantize_row gives; n a multiple of the block size.
  void (*dequantize_row)(TensorType type, const void* src, float* dst, int64_t n) = nullptr;
  // Optional: dot(dequantized row, x) without materializing the row, bit-identical to
  // dot_f32 of the dequantized row; only for types with fused_dot(type).
  bool (*fused_dot)(TensorType type) = nullptr;
  float (*dot_row)(TensorType type, const void* row, const float* x, int64_t n) = nullptr;
  // Optional: register-blocked GEMM straight from packed float rows (types with float_gemm(type)),
  // y[t * y_stride + r] = dot(row r, token t); one order per output for every batch size.
  // rows: n_rows rows of row_bytes holding n elements; x: n_tokens rows of x_stride floats.
  bool (*float_gemm)(TensorType type) = nullptr;
  void (*matmul_float)(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const float* x,
                       int64_t x_stride, int64_t n_tokens, int64_t n, float* y, int64_t y_stride) = nullptr;

  // out[i] = act(gate[i]) * up[i] (ops.h apply_glu); vector paths use their own exp, so bits
  // differ between paths but never with the slice of a row an element is computed in.
  // gate, up, out: [n] (out may alias gate or up).
  void (*glu)(Glu kind, const float* gate, const float* up, float* out, int64_t n) = nullptr;

  // --- Integer path (Q8 activations; bit-identical to int8_dot.h's reference on every path).
  // x: [n], n a multiple of 32; out: [n / 32].
  void (*quantize_q8_blocks)(const float* x, Q8Block* out, int64_t n) = nullptr;
  // y[t * y_stride + r] = dot_int8(row r, token t) for r < n_rows, t < n_tokens.
  // rows: n_rows rows of row_bytes (n_blocks blocks of 32 weights each, a type with has_int8_dot);
  // x: n_tokens tokens of x_stride blocks; scratch: this thread's bytes for unpacked row tiles
  // (empty = none; same bits, slower).
  void (*matmul_int8)(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                      int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                      std::span<std::byte> scratch) = nullptr;
  // Scratch bytes per thread matmul_int8 uses at full speed for rows of n_blocks blocks.
  size_t (*int8_scratch_bytes)(TensorType type, int64_t n_blocks) = nullptr;
  // Tokens matmul hands matmul_int8 per call over a range of rows. Each call unpacks its rows
  // again, so a larger block unpacks less; a smaller one keeps the block's activations in L2 (64
  // tokens of a 5632-long row are 400 KB) while the rows stream past.
  int64_t int8_token_block = 64;

  // --- bf16 path (Activations::Q8 on CPUs with AVX512-BF16; nullptr elsewhere): F16/BF16 weights
  // times activations rounded to bf16 once per matmul (x86/simd_avx512_bf16.h states the order).
  // dst: [n] = x rounded to bf16 (nearest even, denormals to zero).
  void (*round_bf16)(const float* x, uint16_t* dst, int64_t n) = nullptr;
  // y[t * y_stride + r] = bf16 dot(row r, token t); rows: n_rows rows of row_bytes holding n
  // F16 or BF16 elements; x: n_tokens rows of x_stride bf16 values.
  void (*matmul_bf16)(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const uint16_t* x,
                      int64_t x_stride, int64_t n_tokens, int64_t n, float* y, int64_t y_stride) = nullptr;
  // With matmul_bf16: the same product on a matrix packed at load (kernels/bf16_pack.h,
  // TensorView::bf16_groups) in its own order (the packed order, same header): rows [r0, r1) of
  // the matrix `groups` packs (rows of n elements), r0 a multiple of 16; y[t * y_stride + r - r0].
  void (*matmul_bf16_groups)(const void* groups, int64_t r0, int64_t r1, const uint16_t* x, int64_t x_stride,
                             int64_t n_tokens, int64_t n, float* y, int64_t y_stride) = nullptr;

  // --- Attention tiles (attention.cpp).
  // scores[j * s_stride + i] = dot(k[i], q[j]) for i < n_keys, j < n_queries.
  // k: [n_keys][hd] contiguous; q: [n_queries][hd] contiguous.
  void (*tile_scores)(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                      int64_t s_stride) = nullptr;
  // sum_i exp(x[i] - m) with the path's exp (each term in float, the sum in double: a 128k
  // vocabulary's log-sum-exp for reported logprobs). x: [n], every x[i] <= m or -inf.
  double (*sum_exp)(const float* x, float m, int64_t n) = nullptr;
  // s[i] *= scale; returns the largest new s[i] (-inf when n == 0). s: [n]
  float (*scale_max)(float* s, float scale, int64_t n) = nullptr;
  // s[i] = exp(s[i] - m); returns the sum of the new s[i]. s: [n], every s[i] <= m.
  float (*exp_shifted)(float* s, float m, int64_t n) = nullptr;
  // y[c] += sum_i w[i] * rows[i][c], the terms added in order of i. w: [n]; rows: n pointers to [hd].
  void (*accumulate_rows)(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd) = nullptr;
  // y[i] *= s. y: [n]
  void (*scale)(float s, float* y, int64_t n) = nullptr;
  // The KV cache's Q8_0 rows (kv/kv_q8.h): dst[i] = f16 scales[i / group] * q[i].
  // q: [n], scales: [n / group], dst: [n]; n a multiple of group (32, or the whole row).
  void (*dequantize_kv_q8_row)(const int8_t* q, const uint16_t* scales, float* dst, int64_t n,
                               int64_t group) = nullptr;
  // The KV cache's FP8_E4M3 rows (kv/kv_fp8.h): dst[i] = f16 scale * e4m3(codes[i]).
  // codes: [n], dst: [n].
  void (*dequantize_kv_fp8_row)(const uint8_t* codes, uint16_t scale, float* dst, int64_t n) = nullptr;
  // The KV cache's Q4_0 rows (kv/kv_q4.h): dst[i] = f16 scales[i / group] * (nibble i - 8).
  // q: [n / 2], scales: [n / group], dst: [n]; n a multiple of group (32, or the whole row).
  void (*dequantize_kv_q4_row)(const uint8_t* q, const uint16_t* scales, float* dst, int64_t n,
                               int64_t group) = nullptr;
};

// The table of `isa`. Throws std::invalid_argument if this CPU cannot run it.
const KernelTable& kernel_table(Isa isa);

}  // namespace peregrine
