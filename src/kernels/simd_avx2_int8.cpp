// AVX2 integer dot products of Q8_0 / Q4_0 weight rows with Q8 activation
// blocks (int8_dot.h gives the arithmetic and the reduction order, which these
// kernels reproduce bit for bit). Built with -mavx2 -mfma -mf16c; the same
// rules as simd_avx2.cpp apply (no inline library templates here).
#include <immintrin.h>

#include <cstring>

#include "kernels/int8_dot.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_inline.h"

namespace peregrine::avx2 {
namespace {

// How one weight format meets a Q8 activation block. A kernel tile calls, per
// block b:
//   token(x_t)          once per token: per-token work shared by every row of
//   the tile row(blk)            once per row: the row's block, ready to
//   multiply lanes(row, x_t, tk) once per (row, token): the eight exact int32
//   lane sums of int8_dot.h
// so that per-row and per-token work is paid once per tile, not once per
// product.

// Q8_0: 2-byte f16 scale, then 32 signed bytes. vpmaddubsw needs one unsigned
// operand: |w| times x with w's sign moved onto x. Pair sums stay below 2 * 127
// * 127, inside int16.
struct Q8_0Blocks {
  static constexpr size_t kBytes = 34;
  struct Row {
    __m256i abs_w;
    const __m256i *w;  // the signed bytes, read again per token (an L1 hit) to
                       // save a register
  };
  struct Token {};
  static Token token(const Q8Block &) { return {}; }
  static Row row(const unsigned char *blk) {
    const auto *w = reinterpret_cast<const __m256i *>(blk + 2);
    const __m256i v = _mm256_loadu_si256(w);
    return {_mm256_sign_epi8(v, v), w};
  }
  static __m256i lanes(const Row &r, const Q8Block &x, Token) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.q));
    const __m256i pairs = _mm256_maddubs_epi16(r.abs_w, _mm256_sign_epi8(xq, _mm256_loadu_si256(r.w)));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
};

// Q4_0: 2-byte f16 scale, then 16 bytes of nibbles (element j < 16 in the low
// nibble of byte j, j >= 16 in the high nibble of byte j - 16), each weight
// nibble - 8. The unsigned nibbles go straight into vpmaddubsw and the -8 is
// paid per token instead of per product: sum (u - 8) x = sum u x - 8 sum x,
// with 8 (x_2k + x_2k+1) computed once per token as int16 pairs. |u x pair| <=
// 2 * 15 * 127 and |8 x pair| <= 2032, so int16 holds both and their
// difference, and the lane sums are the same integers as the reference's.
struct Q4_0Blocks {
  static constexpr size_t kBytes = 18;
  using Row = __m256i;    // the 32 unsigned nibbles as bytes, in element order
  using Token = __m256i;  // 8 * (x_2k + x_2k+1) as 16 int16
  static Token token(const Q8Block &x) {
    return _mm256_maddubs_epi16(_mm256_set1_epi8(8), _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.q)));
  }
  static Row row(const unsigned char *blk) {
    // Both 128-bit halves get the 16 bytes; the high half shifts right by 4 to
    // bring the high nibbles down, and one mask keeps the nibbles.
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2)));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(15));
  }
  static __m256i lanes(Row u, const Q8Block &x, Token eight_x) {
    const __m256i pairs = _mm256_maddubs_epi16(u, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.q)));
    return _mm256_madd_epi16(_mm256_sub_epi16(pairs, eight_x), _mm256_set1_epi16(1));
  }
};

// The f16 scales of block b of R (<= 4) rows as four floats (lanes >= R are 0).
template <class Blocks, int R>
inline __m128 row_scales(const unsigned char *rows, size_t row_bytes, int64_t b) {
  uint64_t h = 0;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    uint16_t v;
    std::memcpy(&v, rows + r * row_bytes + static_cast<size_t>(b) * Blocks::kBytes, 2);
    h |= static_cast<uint64_t>(v) << (16 * r);
  }
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(h)));
}

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile (R <= 4). rows: R
// rows of row_bytes; x: T tokens of x_stride blocks each. With kPrefetch, the
// tile also prefetches the next R rows (rows + R * row_bytes on), spread evenly
// over its blocks: the rows are short (1-3 KB), so the hardware prefetcher sees
// several brief streams per tile and never gets ahead; software prefetch one
// tile ahead nearly doubled batch-1 decode.
template <class Blocks, int R, int T, bool kPrefetch>
void tile(const unsigned char *rows, size_t row_bytes, const Q8Block *x, int64_t x_stride, int64_t n_blocks, float *y,
          int64_t y_stride) {
  // Every loop over R and T is unrolled so the accumulators live in registers
  // (a rolled loop keeps acc[][] on the stack and runs at the speed of
  // store-to-load forwarding).
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const unsigned char *next = rows + R * row_bytes;
  constexpr size_t kAhead = R * Blocks::kBytes;  // bytes of the next tile per block step
  alignas(16) float scale[T][4];                 // d_w(row r) * d_x(token t), this block
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (kPrefetch) {
      const char *p = reinterpret_cast<const char *>(next + static_cast<size_t>(b) * kAhead);
      _mm_prefetch(p, _MM_HINT_T0);
      if constexpr (kAhead > 64) _mm_prefetch(p + 64, _MM_HINT_T0);
    }
    // d_w * d_x rounded once per product, as the scalar reference does; one
    // multiply serves four rows, and the products are broadcast back from
    // memory (a load, not a shuffle).
    const __m128 dw = row_scales<Blocks, R>(rows, row_bytes, b);
    typename Blocks::Token tk[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const Q8Block &xb = x[t * x_stride + b];
      _mm_store_ps(scale[t], _mm_mul_ps(dw, _mm_broadcast_ss(&xb.d)));
      tk[t] = Blocks::token(xb);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const auto w = Blocks::row(rows + r * row_bytes + static_cast<size_t>(b) * Blocks::kBytes);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 sums = _mm256_cvtepi32_ps(Blocks::lanes(w, x[t * x_stride + b], tk[t]));
        acc[r][t] = _mm256_fmadd_ps(sums, _mm256_broadcast_ss(&scale[t][r]), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = hsum(acc[r][t]);
}

// Tokens per tile in a batch: two, so a 4 x 2 tile's accumulators, the
// per-token terms and the temporaries fit the 16 ymm registers.
constexpr int kTileTokens = 2;

template <class Blocks, int R>
void tile_rows(const unsigned char *rows, size_t row_bytes, const Q8Block *x, int64_t x_stride, int64_t n_tokens,
               int64_t n_blocks, float *y, int64_t y_stride) {
  if (n_tokens == 1) {
    tile<Blocks, R, 1, true>(rows, row_bytes, x, x_stride, n_blocks, y, y_stride);
    return;
  }
  int64_t t = 0;
  // The first token tile streams the rows in from memory and prefetches the
  // next rows; the rest find them in L2.
  for (; t + kTileTokens <= n_tokens; t += kTileTokens) {
    const Q8Block *xt = x + t * x_stride;
    float *yt = y + t * y_stride;
    if (t == 0) {
      tile<Blocks, R, kTileTokens, true>(rows, row_bytes, xt, x_stride, n_blocks, yt, y_stride);
    } else {
      tile<Blocks, R, kTileTokens, false>(rows, row_bytes, xt, x_stride, n_blocks, yt, y_stride);
    }
  }
  for (; t < n_tokens; ++t) {
    tile<Blocks, R, 1, false>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
  }
}

template <class Blocks>
void matmul_blocks(const unsigned char *rows, size_t row_bytes, int64_t n_rows, const Q8Block *x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float *y, int64_t y_stride) {
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    tile_rows<Blocks, 4>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
  for (; r < n_rows; ++r) {
    tile_rows<Blocks, 1>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
}

}  // namespace

void quantize_q8_blocks(const float *x, Q8Block *out, int64_t n) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float *xb = x + b * 32;
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
      q[i] =
          _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // Packing works within 128-bit lanes; the final permute restores element
    // order.
    const __m256i q01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i q23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i bytes = _mm256_packs_epi16(q01, q23);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out[b].q), bytes);
  }
}

void matmul_int8(TensorType type, const void *rows, size_t row_bytes, int64_t n_rows, const Q8Block *x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float *y, int64_t y_stride) {
  const auto *p = static_cast<const unsigned char *>(rows);
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
    // Unrolled so the chains stay in registers; the barrier after each product
    // makes every chain compute its own (else the compiler computes one product
    // per iteration, not eight).
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
      __asm__ volatile("" : "+x"(a));
    }
    // Keeps the compiler from hoisting the loop-invariant products out of the
    // loop.
    __asm__ volatile("" : "+x"(a), "+x"(b));
  }
  __m256i s = acc[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_epi32(s, acc[j]);
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}
}  // namespace peregrine::avx2
