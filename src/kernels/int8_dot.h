#pragma once
// Integer dot products for the quantized weight types (has_int8_dot), llama.cpp's way: the
// activations are rounded once per matmul to 8-bit blocks of 32 with one f32 scale each, and
// every block's product is an exact integer sum scaled by d_weight * d_activation (the K-quants:
// per 32-element sub-block, with its scales and mins; see dot_int8). Per weight byte this is
// about a third of the instructions of dequantize-to-f32-then-FMA, which is what lets decode
// reach the memory bound; the price is the activations' rounding error (relative ~1/254 per
// element).
//
// Reduction order (shared by the scalar reference and the AVX2 kernels, so all give the same
// bits): for each block b in order, the block's 32 products summed exactly as int32 (isum_b), then
// acc = fma(float(isum_b), d_w(b) * d_x(b), acc), starting from acc = 0 (the K-quants' terms are
// given at dot_int8); the result is acc. One float chain per output lets a kernel hold eight
// rows' chains in the eight lanes of a register and pay the int-to-float conversion and the
// multiply-add once per eight rows.
#include <cstdint>

#include "format/tensor_type.h"

namespace peregrine {

// 32 activations: x[i] ~ d * q[i].
struct Q8Block {
  float d;       // absmax / 127 (0 for an all-zero block)
  int32_t sum;   // q[0] + ... + q[31] (Q4_0 kernels subtract 8 * sum once instead of 8 per weight)
  int8_t q[32];  // round-to-nearest-even of x / d, in [-127, 127]
};
static_assert(sizeof(Q8Block) == 40);

// Weight types the integer path handles: every quantized type (the float types take the f32 path).
inline bool has_int8_dot(TensorType t) {
  switch (t) {
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::IQ4_NL:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
    case TensorType::Q4_0_X16:  // int8_layout.h: read only by the AVX-512 kernels
    case TensorType::Q8_0_X16:
      return true;
    default:
      return false;
  }
}

// Types of 256-element super-blocks (8 activation blocks each).
inline bool is_super_block_type(TensorType t) { return tensor_type_info(t).block_elems == 256; }

// x: [n], n a multiple of 32; out: [n / 32].
void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n);

// dot(row, x) for one row of a has_int8_dot type with n_blocks blocks of 32, in the order above.
// row: n_blocks blocks of the type, or n_blocks / 8 super-blocks of 256 (is_super_block_type;
// n_blocks a multiple of 8); x: [n_blocks]. Terms added to acc, per block (32-element types) or
// per 32-element sub-block j (super-blocks), with d_x = x.d and w the weight's integer value:
//   Q8_0, Q4_0 (w = q - 8), Q5_0 (w = q - 16), IQ4_NL (w = the table value):
//       acc = fma(float(sum w x), d * d_x, acc)
//   Q4_1, Q5_1 (d*q + m):  acc = fma(float(sum q x), d * d_x, acc);
//                          acc = fma(float(x.sum), m * d_x, acc)
//   Q4_K, Q5_K (d*sc_j*q - dmin*m_j):  acc = fma(float(sc_j * sum q x), d * d_x, acc);
//                                      acc = fma(float(-(m_j * x.sum)), dmin * d_x, acc)
//   IQ4_XS (d*s_j*value):  acc = fma(float(s_j * sum w x), d * d_x, acc)
//   Q6_K (w = q - 32), Q3_K (w in -4..3), one scale per 16 elements (s_a: elements 0-15 of the
//   sub-block, s_b: 16-31):  acc = fma(float(s_a * sum_lo w x + s_b * sum_hi w x), d * d_x, acc)
//   Q2_K (d*sc*q - dmin*m per 16):  acc = fma(float(sc_a * sum_lo q x + sc_b * sum_hi q x), d * d_x, acc);
//       acc = fma(float(-(m_a * sum_lo x + m_b * sum_hi x)), dmin * d_x, acc)
// Every integer there is exact and below 2^24 (the largest, IQ4_XS's 32 * 32 * 127 * 127, is
// 16516096), so its conversion is exact too, as is a float product of two such factors.
float dot_int8(TensorType type, const void* row, const Q8Block* x, int64_t n_blocks);

}  // namespace peregrine
