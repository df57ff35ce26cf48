#pragma once
// Integer dot products for Q8_0, Q4_0, Q4_K and Q6_K weights (has_int8_dot), llama.cpp's way: the
// activations are rounded once per matmul to 8-bit blocks of 32 with one f32 scale each, and
// every block's product is an exact integer sum scaled by d_weight * d_activation (the K-quants:
// per 32-element sub-block, with its scale and Q4_K's min; see dot_int8). Per weight byte this is
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

// Weight types the integer path handles.
inline bool has_int8_dot(TensorType t) {
  return t == TensorType::Q8_0 || t == TensorType::Q4_0 || t == TensorType::Q4_K || t == TensorType::Q6_K;
}

// x: [n], n a multiple of 32; out: [n / 32].
void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n);

// dot(row, x) for one row of a has_int8_dot type with n_blocks blocks of 32, in the order above.
// row: n_blocks * (34 bytes Q8_0 | 18 bytes Q4_0), or n_blocks / 8 super-blocks of 256 (144 bytes
// Q4_K | 210 bytes Q6_K; n_blocks a multiple of 8); x: [n_blocks].
// K-quants, per 32-element sub-block j: Q4_K (d*sc_j*q - dmin*m_j, q in 0..15) takes
// acc = fma(float(sc_j * sum q x), d * d_x, acc) then acc = fma(float(-m_j * x.sum), dmin * d_x, acc);
// Q6_K (d*sc*(q - 32), one int8 scale per 16) takes acc = fma(float(sc_a * sum_lo + sc_b * sum_hi),
// d * d_x, acc). Every integer there is exact and below 2^24, so its conversion is exact too.
float dot_int8(TensorType type, const void* row, const Q8Block* x, int64_t n_blocks);

}  // namespace peregrine
