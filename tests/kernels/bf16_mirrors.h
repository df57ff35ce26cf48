#pragma once
// Scalar mirrors of the bf16 path (kernels/x86/simd_avx512_bf16.h): what round_to_bf16 and one
// output of matmul_bf16 (rows as stored) and of matmul_bf16_groups (packed rows) must be, bit for
// bit, in plain C++ (no vector instructions).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "format/tensor_type.h"

namespace peregrine::test {

// vcvtneps2bf16: nearest even; a denormal input becomes a zero of its sign; NaN stays NaN (quiet).
inline uint16_t mirror_round_bf16(float f) {
  if (std::fpclassify(f) == FP_SUBNORMAL) f = std::copysign(0.f, f);
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

// A bf16 operand as vdpbf16ps reads it: denormals as zeros of their sign.
inline float mirror_bf16_operand(uint16_t b) {
  const float f = bf16_to_fp32(b);
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.f, f) : f;
}

// A sum as vdpbf16ps writes it: rounded to f32, a denormal result flushed to a zero of its sign.
inline float mirror_ftz(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.f, f) : f; }

// The weight element a bf16 kernel reads: BF16 as stored, F16 widened and rounded to bf16.
inline uint16_t mirror_weight_bf16(TensorType type, const void* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const unsigned char*>(row) + 2 * i, 2);
  return type == TensorType::BF16 ? h : fp32_to_bf16(fp16_to_fp32(h));
}

// One output: 16 lanes; chunk c of 32 elements (zeros past n) adds to lane j the product of
// elements 32c + 2j + 1, then that of 32c + 2j, each addition rounded (the products of two bf16
// are exact in f32); then b[j] = a[j] + a[j + 8] and ((b0 + b4) + (b2 + b6)) + ((b1 + b5) + (b3 + b7)).
inline float mirror_bf16_dot(TensorType type, const void* row, const uint16_t* x, int64_t n) {
  float a[16] = {};
  const auto term = [&](int64_t i) {
    if (i >= n) return 0.f;
    return mirror_bf16_operand(mirror_weight_bf16(type, row, i)) * mirror_bf16_operand(x[i]);
  };
  for (int64_t c = 0; c * 32 < n; ++c) {
    for (int j = 0; j < 16; ++j) {
      a[j] = mirror_ftz(a[j] + term(32 * c + 2 * j + 1));
      a[j] = mirror_ftz(a[j] + term(32 * c + 2 * j));
    }
  }
  float b[8];
  for (int j = 0; j < 8; ++j) b[j] = a[j] + a[j + 8];
  return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

// One output in the packed order (matmul_bf16_groups on rows packed by pack_bf16_groups): ONE
// chain from +0; pair p adds the product of elements 2p + 1, then that of 2p (0 past n), each
// addition rounded; no further sum.
inline float mirror_bf16_dot_packed(TensorType type, const void* row, const uint16_t* x, int64_t n) {
  const auto term = [&](int64_t i) {
    if (i >= n) return 0.f;
    return mirror_bf16_operand(mirror_weight_bf16(type, row, i)) * mirror_bf16_operand(x[i]);
  };
  float a = 0.f;
  for (int64_t p = 0; 2 * p < n; ++p) {
    a = mirror_ftz(a + term(2 * p + 1));
    a = mirror_ftz(a + term(2 * p));
  }
  return a;
}

}  // namespace peregrine::test
