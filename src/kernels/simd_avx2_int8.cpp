// AVX2 integer dot products of Q8_0 / Q4_0 weight rows with Q8 activation blocks (int8_dot.h
// gives the arithmetic and the reduction order, which these kernels reproduce bit for bit).
// Built with -mavx2 -mfma -mf16c; the same rules as simd_avx2.cpp apply (no inline library
// templates here).
//
// Two kernels, one order (per block an exact int32 sum, then one float chain per output):
// - Packed tiles, 4 rows x T tokens, read the GGUF rows in place (batch-1 decode, small
//   batches): every weight byte is read once, and the tile prefetches the next 4 rows while it
//   works. A row's block gives eight int32 lane sums; the four rows' lanes are added across into
//   one int32 per row, and one conversion and multiply-add serve the four rows.
// - Interleaved groups, 8 rows x 4 tokens (batches of kInt8UnpackMinTokens and more): each group
//   of 8 rows is first unpacked once into per-thread scratch with the rows interleaved 4 bytes at
//   a time, so one 32-byte load holds 4 weights of each of the 8 rows; a broadcast of 4
//   activations then multiplies all 8 rows at once, the integer sums stay in int16/int32 for the
//   whole block, and the output lanes are the 8 rows. Per 32-weight product that is ~2.6
//   instructions for Q4_0 (~4.4 for Q8_0), against ~5.5 for a row-at-a-time tile.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/int8_dot.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_inline.h"

namespace peregrine::avx2 {
namespace {

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ---------------------------------------------------------------------------------------------
// Packed tiles.

constexpr int kTileRows = 4;

// A packed weight format is a policy the tile calls per block b:
//   scales<R>(rows, row_bytes, b)  the R rows' f32 scales d_w as four floats (lanes >= R are 0)
//   token(x_t)                     once per token: work shared by every row of the tile
//   row(rows + r * row_bytes + b * kBytes)
//                                  once per row: the row's block, ready to multiply
//   lanes(row, x_t, token)         once per (row, token): eight int32 lanes summing to the
//                                  block's exact product

// Scales of block b of R packed rows whose blocks start with an f16 scale.
template <size_t kBytes, int R>
inline __m128 packed_scales(const unsigned char* rows, size_t row_bytes, int64_t b) {
  uint64_t h = 0;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    uint16_t v;
    std::memcpy(&v, rows + r * row_bytes + static_cast<size_t>(b) * kBytes, 2);
    h |= static_cast<uint64_t>(v) << (16 * r);
  }
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(h)));
}

// GGUF Q8_0 block: f16 scale, then 32 signed bytes. vpmaddubsw needs one unsigned operand, so
// |w| times x with w's sign moved onto x. Pair sums stay below 2 * 127 * 127, inside int16.
struct Q8_0Packed {
  static constexpr size_t kBytes = 34;
  struct Row {
    __m256i abs_w;
    const void* w;  // the signed bytes, read again per token (an L1 hit) to save a register
  };
  struct Token {};
  template <int R>
  static __m128 scales(const unsigned char* rows, size_t row_bytes, int64_t b) {
    return packed_scales<kBytes, R>(rows, row_bytes, b);
  }
  static Token token(const Q8Block&) { return {}; }
  static Row row(const unsigned char* blk) {
    const __m256i w = load(blk + 2);
    return {_mm256_sign_epi8(w, w), blk + 2};
  }
  static __m256i lanes(const Row& r, const Q8Block& x, Token) {
    const __m256i pairs = _mm256_maddubs_epi16(r.abs_w, _mm256_sign_epi8(load(x.q), load(r.w)));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
};

// GGUF Q4_0 block: f16 scale, then 16 bytes; element j < 16 is the low nibble of byte j, element
// j >= 16 the high nibble of byte j - 16; the weight is the nibble - 8. The unsigned nibbles u go
// straight into vpmaddubsw and the -8 is paid per token instead of per product:
// sum (u - 8) x = sum u x - 8 sum x, with 8 (x_2k + x_2k+1) computed once per token as int16
// pairs. |u x pair| <= 2 * 15 * 127 and |8 x pair| <= 2032, so int16 holds both and their
// difference.
struct Q4_0Packed {
  static constexpr size_t kBytes = 18;
  using Row = __m256i;    // the 32 unsigned nibbles as bytes, in element order
  using Token = __m256i;  // 8 * (x_2k + x_2k+1) as 16 int16
  template <int R>
  static __m128 scales(const unsigned char* rows, size_t row_bytes, int64_t b) {
    return packed_scales<kBytes, R>(rows, row_bytes, b);
  }
  static Token token(const Q8Block& x) { return _mm256_maddubs_epi16(_mm256_set1_epi8(8), load(x.q)); }
  static Row row(const unsigned char* blk) {
    // Both 128-bit halves get the 16 bytes; the high half shifts right by 4 to bring the high
    // nibbles down, and one mask keeps the nibbles.
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(15));
  }
  static __m256i lanes(Row u, const Q8Block& x, Token eight_x) {
    const __m256i pairs = _mm256_maddubs_epi16(u, load(x.q));
    return _mm256_madd_epi16(_mm256_sub_epi16(pairs, eight_x), _mm256_set1_epi16(1));
  }
};

// Lane r (r < R) of the result = the sum of the eight int32 lanes of l[r] (exact, so the order
// of the additions does not matter). R is 4 or 1.
template <int R>
inline __m128i sum_lanes(const __m256i (&l)[R]) {
  if constexpr (R == 1) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(l[0]), _mm256_extracti128_si256(l[0], 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  } else {
    static_assert(R == 4);
    // A 4 x 8 transpose folded into the additions: after two rounds each 128-bit half holds
    // [r0, r1, r2, r3] partial sums; adding the halves finishes.
    const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(l[0], l[1]), _mm256_unpackhi_epi32(l[0], l[1]));
    const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(l[2], l[3]), _mm256_unpackhi_epi32(l[2], l[3]));
    const __m256i s = _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  }
}

// Prefetches, over a tile's n_blocks steps, the kTileRows rows that follow it: the rows are
// short (1-3 KB), so the hardware prefetcher sees several brief streams per tile and never gets
// ahead; prefetching one tile ahead nearly doubled batch-1 decode.
template <size_t kStep>
inline void prefetch_ahead(const unsigned char* next, int64_t b) {
  const char* p = reinterpret_cast<const char*>(next + static_cast<size_t>(b) * kStep);
#pragma GCC unroll 8
  for (size_t off = 0; off < kStep; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile (R = 4 or 1). rows: R rows of
// row_bytes; x: T tokens of x_stride blocks each. kPrefetch: prefetch the next R rows.
template <class Blocks, int R, int T, bool kPrefetch>
void tile(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
          int64_t y_stride) {
  // Every loop over R and T is unrolled so the accumulators live in registers.
  __m128 acc[T];  // lane r: row r's float chain for token t
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (kPrefetch) prefetch_ahead<R * Blocks::kBytes>(rows + R * row_bytes, b);
    const __m128 dw = Blocks::template scales<R>(rows, row_bytes, b);
    typename Blocks::Row w[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) w[r] = Blocks::row(rows + r * row_bytes + static_cast<size_t>(b) * Blocks::kBytes);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const Q8Block& xb = x[t * x_stride + b];
      const typename Blocks::Token tk = Blocks::token(xb);
      __m256i l[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) l[r] = Blocks::lanes(w[r], xb, tk);
      // d_w * d_x rounded once, then one fused multiply-add per row, as the reference does.
      const __m128 scale = _mm_mul_ps(dw, _mm_broadcast_ss(&xb.d));
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sum_lanes<R>(l)), scale, acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[t]);
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = out[r];
  }
}

// All n_tokens tokens against R packed rows, two tokens per tile (the register budget); only
// the first tile prefetches: the others find the rows in cache.
template <class Blocks, int R, bool kPrefetch>
void packed_rows(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                 int64_t n_blocks, float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + 2 <= n_tokens; t += 2) {
    const Q8Block* xt = x + t * x_stride;
    float* yt = y + t * y_stride;
    if (t == 0) {
      tile<Blocks, R, 2, kPrefetch>(rows, row_bytes, xt, x_stride, n_blocks, yt, y_stride);
    } else {
      tile<Blocks, R, 2, false>(rows, row_bytes, xt, x_stride, n_blocks, yt, y_stride);
    }
  }
  if (t < n_tokens) {
    const Q8Block* xt = x + t * x_stride;
    float* yt = y + t * y_stride;
    if (t == 0) {
      tile<Blocks, R, 1, kPrefetch>(rows, row_bytes, xt, x_stride, n_blocks, yt, y_stride);
    } else {
      tile<Blocks, R, 1, false>(rows, row_bytes, xt, x_stride, n_blocks, yt, y_stride);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Interleaved groups.

constexpr int kGroupRows = 8;
constexpr int kGroupTokens = 4;
// Per block of a group: 8 chunks of 32 bytes (chunk c: row r's weights 4c..4c+3 at bytes
// 4r..4r+3), then the 8 rows' f32 scales.
constexpr size_t kChunkBytes = 32;
constexpr size_t kGroupScales = 8 * kChunkBytes;
constexpr size_t kGroupBlockBytes = kGroupScales + 8 * sizeof(float);

// In place: v[r] (dword c = row r's weights 4c..4c+3) becomes chunk c (dword r = row r's).
inline void transpose_8x8_epi32(__m256i (&v)[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x20);
    v[c + 4] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x31);
  }
}

// Unpacks 8 packed rows at `rows` into the group layout at dst (n_blocks * kGroupBlockBytes,
// 32-byte aligned), prefetching the 8 rows after them as it goes. Weights as the group tile
// wants them: Q4_0 unsigned nibbles (the -8 is applied to the sum), Q8_0 signed bytes.
template <class Packed>
void unpack_group(const unsigned char* rows, size_t row_bytes, int64_t n_blocks, unsigned char* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead<kGroupRows * Packed::kBytes>(rows + kGroupRows * row_bytes, b);
    __m256i v[8];
    for (int r = 0; r < 8; ++r) {
      const unsigned char* blk = rows + r * row_bytes + static_cast<size_t>(b) * Packed::kBytes;
      if constexpr (Packed::kBytes == Q4_0Packed::kBytes) {
        v[r] = Q4_0Packed::row(blk);
      } else {
        v[r] = load(blk + 2);
      }
    }
    transpose_8x8_epi32(v);
    unsigned char* out = dst + static_cast<size_t>(b) * kGroupBlockBytes;
    for (int c = 0; c < 8; ++c) _mm256_store_si256(reinterpret_cast<__m256i*>(out + c * kChunkBytes), v[c]);
    const __m128 lo = packed_scales<Packed::kBytes, 4>(rows, row_bytes, b);
    const __m128 hi = packed_scales<Packed::kBytes, 4>(rows + 4 * row_bytes, row_bytes, b);
    _mm256_store_ps(reinterpret_cast<float*>(out + kGroupScales), _mm256_set_m128(hi, lo));
  }
}

// The 4 activations x.q[4c..4c+3] in every dword.
inline __m256i broadcast_chunk(const Q8Block& x, int c) {
  int32_t v;
  std::memcpy(&v, x.q + 4 * c, 4);
  return _mm256_set1_epi32(v);
}

// y[t * y_stride + r] = dot(row r, token t) for the 8 rows of an unpacked group and T tokens.
template <bool kQ4_0, int T>
void group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
                int64_t y_stride) {
  __m256 acc[T];  // lane r: row r's float chain for token t
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const unsigned char* blk = group + static_cast<size_t>(b) * kGroupBlockBytes;
    __m256i sum[T];  // Q4_0: int16 pairs (two per row); Q8_0: int32 (one per row)
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + c * kChunkBytes));
      if constexpr (kQ4_0) {
        // |u x| pair sums <= 2 * 15 * 127; eight chunks <= 30480 fit int16.
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_maddubs_epi16(w, broadcast_chunk(x[t * x_stride + b], c));
          sum[t] = c == 0 ? p : _mm256_add_epi16(sum[t], p);
        }
      } else {
        const __m256i abs_w = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i xs = _mm256_sign_epi8(broadcast_chunk(x[t * x_stride + b], c), w);
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, xs), ones);
          sum[t] = c == 0 ? p : _mm256_add_epi32(sum[t], p);
        }
      }
    }
    const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(blk + kGroupScales));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const Q8Block& xb = x[t * x_stride + b];
      __m256i isum = sum[t];
      if constexpr (kQ4_0) isum = _mm256_sub_epi32(_mm256_madd_epi16(isum, ones), _mm256_set1_epi32(8 * xb.sum));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_broadcast_ss(&xb.d)), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

template <bool kQ4_0>
void group_tokens(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_tokens, int64_t n_blocks,
                  float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + kGroupTokens <= n_tokens; t += kGroupTokens) {
    group_tile<kQ4_0, kGroupTokens>(group, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
  }
  const Q8Block* xt = x + t * x_stride;
  float* yt = y + t * y_stride;
  switch (n_tokens - t) {
    case 3:
      return group_tile<kQ4_0, 3>(group, xt, x_stride, n_blocks, yt, y_stride);
    case 2:
      return group_tile<kQ4_0, 2>(group, xt, x_stride, n_blocks, yt, y_stride);
    case 1:
      return group_tile<kQ4_0, 1>(group, xt, x_stride, n_blocks, yt, y_stride);
    default:
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// K-quants: 256-element super-blocks, one Q8 activation block per 32-element sub-block j.
// Packed tiles of 4 (or 1) rows x T tokens, as above: per sub-block each row's eight lanes, added
// across the rows, then the sub-block's multiply-adds once per four rows.

// Q4_K super-block: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
// (sub-blocks 2i and 2i+1 in the low and high nibbles of bytes 32i..32i+31).
struct Q4_KRows {
  static constexpr size_t kBytes = 144;
  // Per row of the tile, for one super-block: d, dmin and the 8 scales and mins.
  struct Meta {
    alignas(16) float d[4], dmin[4];
    alignas(16) int32_t sc[8][4], m[8][4];
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    for (int r = 0; r < 4; ++r) {
      if (r >= R) {
        out.d[r] = out.dmin[r] = 0;
        for (int j = 0; j < 8; ++j) out.sc[j][r] = out.m[j][r] = 0;
        continue;
      }
      const unsigned char* blk = rows + r * row_bytes + static_cast<size_t>(s) * kBytes;
      out.d[r] = half(blk);
      out.dmin[r] = half(blk + 2);
      // The 12 packed bytes as three words, unpacked four fields at a time (ggml's layout:
      // bytes 0-3 scales 0-3 low 6 bits, 4-7 mins 0-3, 8-11 low nibbles scales 4-7 / high
      // nibbles mins 4-7, with the top 2 bits of bytes 0-7 completing fields 4-7).
      uint32_t w[3];
      std::memcpy(w, blk + 4, 12);
      const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
      const uint32_t sc_lo = w[0] & k6, m_lo = w[1] & k6;
      const uint32_t sc_hi = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);
      const uint32_t m_hi = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);
      for (int j = 0; j < 4; ++j) {
        out.sc[j][r] = static_cast<int32_t>((sc_lo >> (8 * j)) & 0xff);
        out.m[j][r] = static_cast<int32_t>((m_lo >> (8 * j)) & 0xff);
        out.sc[j + 4][r] = static_cast<int32_t>((sc_hi >> (8 * j)) & 0xff);
        out.m[j + 4][r] = static_cast<int32_t>((m_hi >> (8 * j)) & 0xff);
      }
    }
  }
  // Sub-block j's 32 weights as unsigned bytes.
  static __m256i weights(const unsigned char* blk, int j) {
    const __m256i v = load(blk + 16 + 32 * (j / 2));
    return _mm256_and_si256(j % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
  }
  static __m256i lanes(const unsigned char* blk, int j, const Q8Block& x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(weights(blk, j), load(x.q)), _mm256_set1_epi16(1));
  }
  // acc += this sub-block for four rows, as the reference: the scale and the min term.
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int j, const Q8Block& x) {
    const __m128 dx = _mm_broadcast_ss(&x.d);
    const __m128 sc = _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mt.sc[j])));
    const __m128 m = _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mt.m[j])));
    // sc * isum and m * sum are exact integers below 2^24, so the float products are exact.
    acc = _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(isum), sc), _mm_mul_ps(_mm_load_ps(mt.d), dx), acc);
    const __m128 min_term = _mm_mul_ps(m, _mm_set1_ps(-static_cast<float>(x.sum)));
    return _mm_fmadd_ps(min_term, _mm_mul_ps(_mm_load_ps(mt.dmin), dx), acc);
  }
};

// Q6_K super-block: ql[128] low nibbles, qh[64] high 2 bits, 16 int8 scales (one per 16
// elements), d (f16). Sub-block j = quarter k = j % 4 of half h = j / 4.
struct Q6_KRows {
  static constexpr size_t kBytes = 210;
  struct Meta {
    alignas(16) float d[4];
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    for (int r = 0; r < 4; ++r)
      out.d[r] = r < R ? half(rows + r * row_bytes + static_cast<size_t>(s) * kBytes + 208) : 0;
  }
  static __m256i weights(const unsigned char* blk, int j) {
    const int h = j / 4, k = j % 4;
    const __m256i l = load(blk + 64 * h + 32 * (k & 1));
    const __m256i hb = load(blk + 128 + 32 * h);
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const __m256i lo = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));  // 0..63
  }
  // Lanes of sc * sum (q - 32) x: unsigned q times x, minus 32 x per pair (|.| <= 8128), times
  // the half's scale in vpmaddwd (elements 0-15 take the first scale, 16-31 the second).
  static __m256i lanes(const unsigned char* blk, int j, const Q8Block& x) {
    const int h = j / 4, k = j % 4;
    const auto* sc = reinterpret_cast<const signed char*>(blk + 192 + 8 * h + 2 * k);
    const __m256i xq = load(x.q);
    const __m256i pairs =
        _mm256_sub_epi16(_mm256_maddubs_epi16(weights(blk, j), xq), _mm256_maddubs_epi16(_mm256_set1_epi8(32), xq));
    const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
    return _mm256_madd_epi16(pairs, scales);
  }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int, const Q8Block& x) {
    return _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm_load_ps(mt.d), _mm_broadcast_ss(&x.d)), acc);
  }
};

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile of K-quant rows (R = 4 or 1).
template <class K, int R, int T, bool kPrefetch>
void k_tile(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_super, float* y,
            int64_t y_stride) {
  __m128 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm_setzero_ps();
  typename K::Meta mt;
  for (int64_t s = 0; s < n_super; ++s) {
    if constexpr (kPrefetch) prefetch_ahead<R * K::kBytes>(rows + R * row_bytes, s);
    K::template meta<R>(rows, row_bytes, s, mt);
    const unsigned char* blk[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * K::kBytes;
    for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * x_stride + 8 * s + j];
        __m256i l[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) l[r] = K::lanes(blk[r], j, xb);
        acc[t] = K::accumulate(acc[t], sum_lanes<R>(l), mt, j, xb);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[t]);
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = out[r];
  }
}

template <class K, int R, bool kPrefetch>
void k_rows(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
            int64_t n_super, float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + 2 <= n_tokens; t += 2) {
    if (t == 0) {
      k_tile<K, R, 2, kPrefetch>(rows, row_bytes, x, x_stride, n_super, y, y_stride);
    } else {
      k_tile<K, R, 2, false>(rows, row_bytes, x + t * x_stride, x_stride, n_super, y + t * y_stride, y_stride);
    }
  }
  if (t < n_tokens) {
    if (t == 0) {
      k_tile<K, R, 1, kPrefetch>(rows, row_bytes, x, x_stride, n_super, y, y_stride);
    } else {
      k_tile<K, R, 1, false>(rows, row_bytes, x + t * x_stride, x_stride, n_super, y + t * y_stride, y_stride);
    }
  }
}

// Q4_K batches: groups of 8 rows unpacked per super-block into 8 sub-blocks x 8 interleaved
// chunks (as the Q8_0/Q4_0 groups), then per sub-block the 8 rows' scales and mins as floats, and
// the rows' d and dmin. The integer sums stay in int16 for a whole sub-block (|q x| pair sums <=
// 3810, eight chunks <= 30480).
constexpr size_t kQ4KGroupScales = 8 * 8 * kChunkBytes;  // after the chunks
constexpr size_t kQ4KGroupMins = kQ4KGroupScales + 8 * 8 * sizeof(float);
constexpr size_t kQ4KGroupD = kQ4KGroupMins + 8 * 8 * sizeof(float);  // d[8], then dmin[8]
constexpr size_t kQ4KGroupBytes = kQ4KGroupD + 16 * sizeof(float);    // per super-block

void unpack_q4_k_group(const unsigned char* rows, size_t row_bytes, int64_t n_super, unsigned char* dst) {
  for (int64_t s = 0; s < n_super; ++s) {
    prefetch_ahead<kGroupRows * Q4_KRows::kBytes>(rows + kGroupRows * row_bytes, s);
    unsigned char* out = dst + static_cast<size_t>(s) * kQ4KGroupBytes;
    const unsigned char* blk[8];
    for (int r = 0; r < 8; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * Q4_KRows::kBytes;
    for (int j = 0; j < 8; ++j) {
      __m256i v[8];
      for (int r = 0; r < 8; ++r) v[r] = Q4_KRows::weights(blk[r], j);
      transpose_8x8_epi32(v);
      for (int c = 0; c < 8; ++c) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + (8 * j + c) * kChunkBytes), v[c]);
      }
    }
    Q4_KRows::Meta lo, hi;
    Q4_KRows::meta<4>(rows, row_bytes, s, lo);
    Q4_KRows::meta<4>(rows + 4 * row_bytes, row_bytes, s, hi);
    auto* sc = reinterpret_cast<float*>(out + kQ4KGroupScales);
    auto* m = reinterpret_cast<float*>(out + kQ4KGroupMins);
    auto* d = reinterpret_cast<float*>(out + kQ4KGroupD);
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < 8; ++j) {
        sc[8 * j + r] = static_cast<float>(lo.sc[j][r]);
        sc[8 * j + r + 4] = static_cast<float>(hi.sc[j][r]);
        m[8 * j + r] = static_cast<float>(lo.m[j][r]);
        m[8 * j + r + 4] = static_cast<float>(hi.m[j][r]);
      }
      d[r] = lo.d[r];
      d[r + 4] = hi.d[r];
      d[8 + r] = lo.dmin[r];
      d[8 + r + 4] = hi.dmin[r];
    }
  }
}

template <int T>
void q4_k_group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_super, float* y,
                     int64_t y_stride) {
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t s = 0; s < n_super; ++s) {
    const unsigned char* sb = group + static_cast<size_t>(s) * kQ4KGroupBytes;
    const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ4KGroupD));
    const __m256 dmin = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ4KGroupD) + 8);
    for (int j = 0; j < 8; ++j) {
      __m256i sum[T];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + (8 * j + c) * kChunkBytes));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_maddubs_epi16(w, broadcast_chunk(x[t * x_stride + 8 * s + j], c));
          sum[t] = c == 0 ? p : _mm256_add_epi16(sum[t], p);
        }
      }
      const __m256 sc = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ4KGroupScales) + 8 * j);
      const __m256 m = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ4KGroupMins) + 8 * j);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * x_stride + 8 * s + j];
        const __m256 dx = _mm256_broadcast_ss(&xb.d);
        const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sum[t], ones)), sc);  // exact
        acc[t] = _mm256_fmadd_ps(term, _mm256_mul_ps(d, dx), acc[t]);
        const __m256 min_term = _mm256_mul_ps(m, _mm256_set1_ps(-static_cast<float>(xb.sum)));  // exact
        acc[t] = _mm256_fmadd_ps(min_term, _mm256_mul_ps(dmin, dx), acc[t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

void q4_k_group_tokens(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                       int64_t n_super, float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + kGroupTokens <= n_tokens; t += kGroupTokens) {
    q4_k_group_tile<kGroupTokens>(group, x + t * x_stride, x_stride, n_super, y + t * y_stride, y_stride);
  }
  const Q8Block* xt = x + t * x_stride;
  float* yt = y + t * y_stride;
  switch (n_tokens - t) {
    case 3:
      return q4_k_group_tile<3>(group, xt, x_stride, n_super, yt, y_stride);
    case 2:
      return q4_k_group_tile<2>(group, xt, x_stride, n_super, yt, y_stride);
    case 1:
      return q4_k_group_tile<1>(group, xt, x_stride, n_super, yt, y_stride);
    default:
      return;
  }
}

template <class K>
void matmul_k(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
              int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::span<std::byte> scratch) {
  const int64_t n_super = n_blocks / 8;
  int64_t r = 0;
  if constexpr (std::is_same_v<K, Q4_KRows>) {
    if (n_tokens >= kInt8UnpackMinTokens && scratch.size() >= int8_unpack_scratch_bytes(TensorType::Q4_K, n_blocks)) {
      auto* group = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 31) / 32 * 32);
      for (; r + kGroupRows <= n_rows; r += kGroupRows) {
        unpack_q4_k_group(rows + r * row_bytes, row_bytes, n_super, group);
        q4_k_group_tokens(group, x, x_stride, n_tokens, n_super, y + r, y_stride);
      }
    }
  }
  for (; r + kTileRows <= n_rows; r += kTileRows) {
    k_rows<K, kTileRows, true>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_super, y + r, y_stride);
  }
  for (; r < n_rows; ++r) {
    k_rows<K, 1, false>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_super, y + r, y_stride);
  }
}

// ---------------------------------------------------------------------------------------------

template <class Packed>
void matmul_blocks(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::span<std::byte> scratch) {
  constexpr bool kQ4_0 = Packed::kBytes == Q4_0Packed::kBytes;
  int64_t r = 0;
  if (n_tokens >= kInt8UnpackMinTokens &&
      scratch.size() >= int8_unpack_scratch_bytes(kQ4_0 ? TensorType::Q4_0 : TensorType::Q8_0, n_blocks)) {
    auto* group = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 31) / 32 * 32);
    for (; r + kGroupRows <= n_rows; r += kGroupRows) {
      unpack_group<Packed>(rows + r * row_bytes, row_bytes, n_blocks, group);
      group_tokens<kQ4_0>(group, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
    }
  }
  for (; r + kTileRows <= n_rows; r += kTileRows) {
    packed_rows<Packed, kTileRows, true>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r,
                                         y_stride);
  }
  for (; r < n_rows; ++r) {
    packed_rows<Packed, 1, false>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
}

}  // namespace

size_t int8_unpack_scratch_bytes(TensorType type, int64_t n_blocks) {
  const size_t bytes = type == TensorType::Q4_K ? static_cast<size_t>(n_blocks / 8) * kQ4KGroupBytes
                                                : static_cast<size_t>(n_blocks) * kGroupBlockBytes;
  return bytes + 32;  // + 32: room to align the start
}

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
      q[i] =
          _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // The sum from the int32 values before packing.
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    out[b].sum = _mm_cvtsi128_si32(s4);
    // Packing works within 128-bit lanes; the final permute restores element order.
    const __m256i q01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i q23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i bytes = _mm256_packs_epi16(q01, q23);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), bytes);
  }
}

void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                 std::span<std::byte> scratch) {
  const auto* p = static_cast<const unsigned char*>(rows);
  if (type == TensorType::Q4_K) {
    return matmul_k<Q4_KRows>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  }
  if (type == TensorType::Q6_K) {
    return matmul_k<Q6_KRows>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  }
  if (type == TensorType::Q8_0) {
    matmul_blocks<Q8_0Packed>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  } else {
    matmul_blocks<Q4_0Packed>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
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
