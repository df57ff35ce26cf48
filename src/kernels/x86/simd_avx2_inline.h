#pragma once
// Small AVX2 helpers shared by the files built with -mavx2 -mfma -mf16c (simd_avx2*.cpp).
// Include nowhere else: these functions contain AVX2 instructions.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/x86/simd_x86_shared.h"

namespace peregrine::avx2 {

// This path's tag for the shared helpers (simd_x86_shared.h).
struct Tag {};

// Horizontal sum in a fixed tree: ((0+4)+(2+6)) + ((1+5)+(3+7)). Part of every reduction order
// the kernels document, so do not change it.
inline float hsum(__m256 v) { return simd_x86::hsum8<Tag>(v); }

// The f16 value stored (little-endian, possibly unaligned) at p.
inline float half(const unsigned char* p) { return simd_x86::half_at<Tag>(p); }

}  // namespace peregrine::avx2
