#pragma once
// Small AVX2 helpers shared by the files built with -mavx2 -mfma -mf16c (simd_avx2*.cpp).
// Include nowhere else: these functions contain AVX2 instructions.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace peregrine::avx2 {

// Horizontal sum in a fixed tree: ((0+4)+(2+6)) + ((1+5)+(3+7)). Part of every reduction order
// the kernels document, so do not change it.
inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                 // (0+4, 1+5, 2+6, 3+7)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));        // (0+4+2+6, 1+5+3+7)
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The f16 value stored (little-endian, possibly unaligned) at p.
inline float half(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

}  // namespace peregrine::avx2
