#pragma once
// The avx512 path's horizontal sums of register tiles (hsum16's tree for many accumulators at
// once), shared by the float GEMM (simd_avx512.cpp) and the bf16 GEMM (simd_avx512_bf16.cpp).
// Include only from the files built with the AVX-512 flags.
#include <immintrin.h>

#include <cstdint>

#include "kernels/x86/simd_avx512_inline.h"

namespace peregrine::avx512 {

// hsum16's tree for many accumulators at once: each output gets the same additions on the same
// operands in the same order (left operand first, as hsum16 has it), 16 outputs per instruction
// instead of one. fold8: lanes 0-7 hold a[j] + a[j + 8], lanes 8-15 the same for b.
[[gnu::always_inline]] inline __m512 fold8(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}
// Of two fold8 results: quarter q holds c[k] = b[k] + b[k + 4] (k < 4) of the q-th input
// accumulator (ab's two, then cd's two).
[[gnu::always_inline]] inline __m512 fold4(__m512 ab, __m512 cd) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}
// Of two fold4 results, per quarter: (c0 + c2, c1 + c3) of x's accumulator, then of y's.
[[gnu::always_inline]] inline __m512 fold2(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Of two fold2 results, per quarter: the final (c0 + c2) + (c1 + c3) of x's two accumulators,
// then of y's two.
[[gnu::always_inline]] inline __m512 fold1(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// y[t * y_stride + r] = hsum16(acc[r0 + r][t0 + t]) for r < 4, t < 4 (four tokens of four rows),
// bit for bit, 16 outputs at a time: the result's quarter t holds rows r0..r0+3 of token t0 + t.
template <int R, int T>
[[gnu::always_inline]] inline void store_4x4(const __m512 (&acc)[R][T], int r0, int t0, float* y, int64_t y_stride) {
  __m512 rows[4];  // rows[r]: fold4 of row r's accumulators of tokens t0..t0+3
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    rows[r] = fold4(fold8(acc[r0 + r][t0], acc[r0 + r][t0 + 1]), fold8(acc[r0 + r][t0 + 2], acc[r0 + r][t0 + 3]));
  }
  const __m512 s = fold1(fold2(rows[0], rows[1]), fold2(rows[2], rows[3]));
  float* out = y + t0 * y_stride + r0;
  _mm_storeu_ps(out, _mm512_castps512_ps128(s));
  _mm_storeu_ps(out + y_stride, _mm512_extractf32x4_ps(s, 1));
  _mm_storeu_ps(out + 2 * y_stride, _mm512_extractf32x4_ps(s, 2));
  _mm_storeu_ps(out + 3 * y_stride, _mm512_extractf32x4_ps(s, 3));
}

// The same for K = 1..3 tokens of four rows, folding each token's four rows together instead
// (3 folds per token and 2-3 to finish, against 15 for four padded tokens): s's lane 4r + t holds
// row r of token t, and one permutation turns it token-major.
template <int K, int R, int T>
[[gnu::always_inline]] inline void store_4xk(const __m512 (&acc)[R][T], int r0, int t0, float* y, int64_t y_stride) {
  static_assert(K >= 1 && K <= 3);
  __m512 v[K];  // v[t]: quarter r holds row r's c[k] (fold4) for token t0 + t
#pragma GCC unroll 3
  for (int t = 0; t < K; ++t) {
    v[t] = fold4(fold8(acc[r0][t0 + t], acc[r0 + 1][t0 + t]), fold8(acc[r0 + 2][t0 + t], acc[r0 + 3][t0 + t]));
  }
  const __m512 lo = fold2(v[0], K > 1 ? v[1] : v[0]);
  const __m512 hi = K > 2 ? fold2(v[2], v[2]) : lo;
  const __m512 s = fold1(lo, hi);
  // Lane 4t + r of the result = lane 4r + t of s.
  const __m512 by_token =
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
  float* out = y + t0 * y_stride + r0;
  _mm_storeu_ps(out, _mm512_castps512_ps128(by_token));
  if (K > 1) _mm_storeu_ps(out + y_stride, _mm512_extractf32x4_ps(by_token, 1));
  if (K > 2) _mm_storeu_ps(out + 2 * y_stride, _mm512_extractf32x4_ps(by_token, 2));
}

// y[t * y_stride + r] = hsum16(acc[r][t]) for the whole tile (R a multiple of 4), bit for bit.
template <int R, int T>
[[gnu::always_inline]] inline void store_sums(const __m512 (&acc)[R][T], float* y, int64_t y_stride) {
#pragma GCC unroll 2
  for (int r0 = 0; r0 < R; r0 += 4) {
    int t0 = 0;
#pragma GCC unroll 4
    for (; t0 + 4 <= T; t0 += 4) store_4x4<R, T>(acc, r0, t0, y, y_stride);
    if constexpr (T % 4 == 1) store_4xk<1, R, T>(acc, r0, T - 1, y, y_stride);
    if constexpr (T % 4 == 2) store_4xk<2, R, T>(acc, r0, T - 2, y, y_stride);
    if constexpr (T % 4 == 3) store_4xk<3, R, T>(acc, r0, T - 3, y, y_stride);
  }
}

}  // namespace peregrine::avx512
