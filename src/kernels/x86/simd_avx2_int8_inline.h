#pragma once
// Helpers shared by the AVX2 integer kernels (simd_avx2_int8.cpp for Q8_0/Q4_0,
// simd_avx2_int8_k.cpp for the K-quants). Include only from files built with -mavx2 -mfma
// -mf16c: these functions contain AVX2 instructions.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "format/tensor_type.h"
#include "kernels/int8_dot.h"
#include "kernels/x86/simd_avx2_inline.h"
#include "kernels/x86/simd_tiles.h"

namespace peregrine::avx2::int8 {

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

constexpr int kTileRows = 4;

// Lane r (r < R) of the result = the sum of the eight int32 lanes of l[r]. R is 4 or 1.
template <int R>
inline __m128i sum_lanes(const __m256i (&l)[R]) {
  return simd_x86::sum_lanes<Tag, R>(l);
}

// Prefetches, over a tile's n_blocks steps, the kTileRows rows that follow it (see
// simd_x86_shared.h).
template <size_t kStep>
inline void prefetch_ahead(const unsigned char* next, int64_t b) {
  simd_x86::prefetch_ahead<Tag, kStep>(next, b);
}

// y[t * y_stride + r] = lane r of acc[t], for r < R (the packed tiles' 4-row accumulators).
template <int R, int T>
inline void store_rows(const __m128 (&acc)[T], float* y, int64_t y_stride) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[t]);
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = out[r];
  }
}

using simd::token_tiles;
using simd::Tokens;

// The first kTileRows rows of a range: each packed tile prefetches the next, but the first tile
// of a thread's task has no one to (measured: ~+3 % batch-1 decode, 6 of 8 paired runs).
inline void prefetch_first_tile(const unsigned char* rows, size_t row_bytes) {
  const char* p = reinterpret_cast<const char*>(rows);
  for (size_t off = 0; off < kTileRows * row_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

constexpr int kGroupRows = 8;
constexpr int kGroupTokens = 4;
// Per block of a group: 8 chunks of 32 bytes (chunk c: row r's weights 4c..4c+3 at bytes
// 4r..4r+3), then the 8 rows' f32 scales.
constexpr size_t kChunkBytes = 32;
constexpr size_t kGroupScales = 8 * kChunkBytes;
constexpr size_t kGroupBlockBytes = kGroupScales + 8 * sizeof(float);

// In place: v[r] (dword c = row r's weights 4c..4c+3) becomes chunk c (dword r = row r's).
[[gnu::always_inline]] inline void transpose_8x8_epi32(__m256i (&v)[8]) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x20);
    v[c + 4] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x31);
  }
}

// The 4 activations x.q[4c..4c+3] in every dword.
inline __m256i broadcast_chunk(const Q8Block& x, int c) {
  int32_t v;
  std::memcpy(&v, x.q + 4 * c, 4);
  return _mm256_set1_epi32(v);
}

// ---------------------------------------------------------------------------------------------
// Packed tiles by sub-block, for every type whose rows decode 32 weights at a time. A policy K:
//   kBytes, kSub                  bytes of a block, 32-weight sub-blocks in it (1 or 8)
//   Meta, meta<R>(rows, row_bytes, s, out)
//                                 per block s, what the R rows' accumulate steps need (scales)
//   Row, row(blk, j)              sub-block j of a row's block, decoded once for every token
//   Token, token(x)               per activation block: work shared by every row
//   lanes(row, x, token)          eight int32 lanes summing to the sub-block's integer product
//   accumulate(acc, isum, meta, j, x, token)
//                                 acc (lane r: row r's chain) after sub-block j, isum lane r =
//                                 row r's integer sum, in int8_dot.h's order

// Integer lanes the policies share (eight int32 lanes summing to the exact product):
// unsigned weights u (bytes 0..127) times x;
inline __m256i unsigned_lanes(__m256i u, const Q8Block& x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, load(x.q)), _mm256_set1_epi16(1));
}
// signed weights w (|w| <= 127) times x: vpmaddubsw needs one unsigned operand, so |w| times x
// with w's sign moved onto x (pair sums within 2 * 127 * 127, inside int16);
inline __m256i signed_lanes(__m256i w, const Q8Block& x) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(load(x.q), w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}
// offset weights u - bias (u unsigned): sum (u - bias) x = sum u x - bias sum x per int16 pair,
// with bias_x = bias_pairs(bias, x) computed once per token, then int16 factors per pair
// (ones, or per-half scales) in vpmaddwd. The caller bounds |u x pair| + |bias x pair| < 2^15.
inline __m256i bias_pairs(int8_t bias, const Q8Block& x) {
  return _mm256_maddubs_epi16(_mm256_set1_epi8(bias), load(x.q));
}
inline __m256i offset_lanes(__m256i u, const Q8Block& x, __m256i bias_x, __m256i factors) {
  return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, load(x.q)), bias_x), factors);
}

// The common part of the policies of 32-element blocks that start with their f16 d and add
// float(isum) * (d * d_x) per block (Q8_0, Q4_0, Q5_0, IQ4_NL).
template <size_t kBlockBytes>
struct ScaledBlocks32 {
  static constexpr size_t kBytes = kBlockBytes;
  static constexpr int kSub = 1;
  struct Meta {
    __m128 d;
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    out.d = simd_x86::packed_scales<Tag, kBytes, R>(rows, row_bytes, s);
  }
  // d_w * d_x rounded once, then one fused multiply-add per row, as the reference does.
  template <class Token>
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int, const Q8Block& x, Token) {
    return _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(mt.d, _mm_broadcast_ss(&x.d)), acc);
  }
};

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile (R = 4 or 1). rows: R rows of
// row_bytes; x: T tokens of x_stride blocks. kPrefetch: prefetch the next R rows.
template <class K, int R, int T, bool kPrefetch>
void sub_block_tile(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_super,
                    float* y, int64_t y_stride) {
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
#pragma GCC unroll 8
    for (int j = 0; j < K::kSub; ++j) {
      typename K::Row w[R];  // decoded once per row, used by every token
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) w[r] = K::row(blk[r], j);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * x_stride + K::kSub * s + j];
        const typename K::Token tk = K::token(xb);
        __m256i l[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) l[r] = K::lanes(w[r], xb, tk);
        acc[t] = K::accumulate(acc[t], sum_lanes<R>(l), mt, j, xb, tk);
      }
    }
  }
  store_rows<R, T>(acc, y, y_stride);
}

// All n_tokens tokens against R rows, two tokens per tile (the register budget); only the first
// tile prefetches: the others find the rows in cache.
template <class K, int R, bool kPrefetch>
void sub_block_tokens(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                      int64_t n_super, float* y, int64_t y_stride) {
  token_tiles<2>(n_tokens, [&](auto tokens, int64_t t) {
    constexpr int T = decltype(tokens)::value;
    if (t == 0) {
      sub_block_tile<K, R, T, kPrefetch>(rows, row_bytes, x, x_stride, n_super, y, y_stride);
    } else {
      sub_block_tile<K, R, T, false>(rows, row_bytes, x + t * x_stride, x_stride, n_super, y + t * y_stride, y_stride);
    }
  });
}

// matmul_int8's contract on packed tiles alone: 4-row tiles, then single rows.
template <class K>
void sub_block_rows(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                    int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride) {
  const int64_t n_super = n_blocks / K::kSub;
  int64_t r = 0;
  if (r + kTileRows <= n_rows) prefetch_first_tile(rows, row_bytes);
  for (; r + kTileRows <= n_rows; r += kTileRows) {
    sub_block_tokens<K, kTileRows, true>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_super, y + r,
                                         y_stride);
  }
  for (; r < n_rows; ++r) {
    sub_block_tokens<K, 1, false>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_super, y + r, y_stride);
  }
}

// The K-quant kernels (simd_avx2_int8_k.cpp), with matmul_int8's contract for type Q4_K / Q6_K.
void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
              std::span<std::byte> scratch);
// Scratch bytes the Q4_K / Q6_K group kernels unpack n_blocks / 8 super-blocks of 8 rows into.
size_t k_group_bytes(TensorType type, int64_t n_blocks);
// The types with packed tiles only (simd_avx2_int8_tiles.cpp: Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K,
// Q3_K, IQ4_XS), with matmul_int8's contract (no scratch used).
void matmul_tiles(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                  int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride);

}  // namespace peregrine::avx2::int8
