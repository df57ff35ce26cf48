#pragma once
// Scalar mirrors of the float GEMM's reduction orders: what one output of each path's
// matmul_float must be, bit for bit, given the weights as exact f32 (f16 and bf16 widen exactly).
// Every multiply-add here is std::fma: one rounding, as in the kernels.
#include <cmath>
#include <cstdint>

namespace peregrine::test {

// The avx512 order (simd_avx512.h): 16 lanes by fused multiply-add, lane j taking elements j,
// j + 16, ...; then b[j] = a[j] + a[j + 8] and ((b0 + b4) + (b2 + b6)) + ((b1 + b5) + (b3 + b7)).
inline float avx512_order_dot(const float* w, const float* x, int64_t n) {
  float a[16] = {};
  for (int64_t i = 0; i < n; ++i) a[i % 16] = std::fma(w[i], x[i], a[i % 16]);
  float b[8];
  for (int j = 0; j < 8; ++j) b[j] = a[j] + a[j + 8];
  return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

// The AVX2 float GEMM's order (simd_avx2.cpp, float_tile): 8 lanes by fused multiply-add over the
// full groups of 8, lane j taking elements j, j + 8, ...; the tree ((0+4)+(2+6)) + ((1+5)+(3+7));
// then the last n % 8 elements in order, each by a fused multiply-add into the sum.
inline float avx2_order_dot(const float* w, const float* x, int64_t n) {
  float a[8] = {};
  const int64_t full = n - n % 8;
  for (int64_t i = 0; i < full; ++i) a[i % 8] = std::fma(w[i], x[i], a[i % 8]);
  float sum = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (int64_t i = full; i < n; ++i) sum = std::fma(w[i], x[i], sum);
  return sum;
}

}  // namespace peregrine::test
