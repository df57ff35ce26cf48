// AVX2 integer dot products of Q8_0 / Q4_0 weight rows with Q8 activation blocks (int8_dot.h
// gives the arithmetic and the reduction order, which these kernels reproduce bit for bit).
// Built with -mavx2 -mfma -mf16c; the same rules as simd_avx2.cpp apply (no inline library
// templates here).
#include <immintrin.h>

#include <cstring>

#include "kernels/int8_dot.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_inline.h"

namespace peregrine::avx2 {
namespace {

// The 32 weights of one block as signed bytes, in element order.
struct Q8_0Blocks {
  static constexpr size_t kBytes = 34;
  static __m256i weights(const unsigned char* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  }
};
struct Q4_0Blocks {
  static constexpr size_t kBytes = 18;
  static __m256i weights(const unsigned char* b) {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i mask = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(qs, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
    const __m256i w = _mm256_set_m128i(hi, lo);
    return _mm256_sub_epi8(w, _mm256_set1_epi8(8));
  }
};

// Eight int32 lanes, lane j = sum of w[i] * x[i] over i in 4j..4j+3. vpmaddubsw needs one
// unsigned operand: |w| times x with w's sign moved onto x. Pair sums stay below 2 * 128 * 127,
// inside int16.
inline __m256i lane_sums(__m256i abs_w, __m256i w, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile. rows: R rows of row_bytes;
// x: T tokens of x_stride blocks each.
template <class Blocks, int R, int T>
void tile(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_blocks,
          float* y, int64_t y_stride) {
  // Every loop over R and T is unrolled so the accumulators live in registers (a rolled loop
  // keeps acc[][] on the stack and runs at the speed of store-to-load forwarding).
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i xq[T];
    const float* xd[T];  // broadcast from memory inside the loop: a load, not a shuffle
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const Q8Block& xb = x[t * x_stride + b];
      xq[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      xd[t] = &xb.d;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const unsigned char* blk = rows + r * row_bytes + static_cast<size_t>(b) * Blocks::kBytes;
      const __m256i w = Blocks::weights(blk);
      const __m256i aw = _mm256_sign_epi8(w, w);
      const __m256 wd = _mm256_set1_ps(half(blk));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 sums = _mm256_cvtepi32_ps(lane_sums(aw, w, xq[t]));
        // d_w * d_x rounded once, as the scalar reference does.
        acc[r][t] = _mm256_fmadd_ps(sums, _mm256_mul_ps(wd, _mm256_broadcast_ss(xd[t])), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = hsum(acc[r][t]);
}

template <class Blocks, int R>
void tile_rows(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
               int64_t n_blocks, float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + 2 <= n_tokens; t += 2) {
    tile<Blocks, R, 2>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
  }
  if (t < n_tokens) tile<Blocks, R, 1>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
}

template <class Blocks>
void matmul_blocks(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride) {
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    tile_rows<Blocks, 4>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
  for (; r < n_rows; ++r) {
    tile_rows<Blocks, 1>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
}

}  // namespace

void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    out[b].d = d;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // Packing works within 128-bit lanes; the final permute restores element order.
    const __m256i q01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i q23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i bytes = _mm256_packs_epi16(q01, q23);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), bytes);
  }
}

void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride) {
  const auto* p = static_cast<const unsigned char*>(rows);
  if (type == TensorType::Q8_0) {
    matmul_blocks<Q8_0Blocks>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride);
  } else {
    matmul_blocks<Q4_0Blocks>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride);
  }
}

}  // namespace peregrine::avx2

namespace peregrine::avx2 {
int64_t int8_peak_loop(int64_t iters) {
  __m256i acc[8];
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_set1_epi32(j);
  for (int64_t i = 0; i < iters; ++i) {
    // Unrolled so the chains stay in registers; the barrier after each product makes every
    // chain compute its own (else the compiler computes one product per iteration, not eight).
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
      __asm__ volatile("" : "+x"(a));
    }
    // Keeps the compiler from hoisting the loop-invariant products out of the loop.
    __asm__ volatile("" : "+x"(a), "+x"(b));
  }
  __m256i s = acc[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_epi32(s, acc[j]);
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}
}  // namespace peregrine::avx2
