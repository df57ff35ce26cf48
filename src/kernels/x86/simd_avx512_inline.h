#pragma once
// Small AVX-512 helpers shared by the files built with the AVX-512 flags (simd_avx512*.cpp).
// Include nowhere else: these functions contain AVX-512 instructions. They live in namespace
// avx512, so no inline function compiled here shares a name with one compiled for AVX2.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/x86/simd_x86_shared.h"

namespace peregrine::avx512 {

// This path's tag for the shared helpers (simd_x86_shared.h).
struct Tag {};

// Horizontal sum in the fixed tree simd_avx512.h documents: b[j] = a[j] + a[j + 8], then
// ((b0 + b4) + (b2 + b6)) + ((b1 + b5) + (b3 + b7)). Part of every float reduction order of the
// avx512 path, so do not change it.
inline float hsum16(__m512 a) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  return simd_x86::hsum8<Tag>(_mm256_add_ps(_mm512_castps512_ps256(a), hi));
}

// The f16 value stored (little-endian, possibly unaligned) at p.
inline float half_at(const unsigned char* p) { return simd_x86::half_at<Tag>(p); }

// Lanes [0, n) of a 16-lane mask (n <= 16).
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

}  // namespace peregrine::avx512
