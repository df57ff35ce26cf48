// AVX-512 VNNI integer dot products of Q4_K / Q6_K weight rows with Q8 activation blocks: the
// K-quant half of avx512::matmul_int8 (simd_avx512_int8_inline.h describes the two kernels). A
// super-block of 256 weights meets 8 activation blocks, one per 32-element sub-block; the
// arithmetic and its order are int8_dot.h's, reproduced bit for bit. Built with the AVX-512 flags.
#include <immintrin.h>

#include <cstring>

#include "kernels/simd_avx512.h"
#include "kernels/simd_avx512_inline.h"
#include "kernels/simd_avx512_int8_inline.h"

namespace peregrine::avx512::int8 {
namespace {

// Q4_K's 8 six-bit scales and mins from the 12 packed bytes at p (ggml's layout: bytes 0-3
// scales 0-3 low 6 bits, 4-7 mins 0-3, 8-11 low nibbles scales 4-7 / high nibbles mins 4-7, with
// the top 2 bits of bytes 0-7 completing fields 4-7).
inline void q4_k_scales_mins(const unsigned char* p, float (&sc)[8], float (&m)[8]) {
  uint32_t w[3];
  std::memcpy(w, p, 12);
  const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const uint32_t sc_lo = w[0] & k6, m_lo = w[1] & k6;
  const uint32_t sc_hi = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<float>((sc_lo >> (8 * j)) & 0xff);
    m[j] = static_cast<float>((m_lo >> (8 * j)) & 0xff);
    sc[j + 4] = static_cast<float>((sc_hi >> (8 * j)) & 0xff);
    m[j + 4] = static_cast<float>((m_hi >> (8 * j)) & 0xff);
  }
}

// A K-quant format is a policy both kernels call:
//   kBytes, kType                the super-block's bytes and the tensor type
//   weights(blk, j)              sub-block j's 32 weights as unsigned bytes (the tile's lanes
//                                and the group's chunks)
//   Meta, meta<R>(...)           per super-block of the packed tile's R rows: the float factors
//   Row, row(blk, j)             once per row and sub-block, ready to multiply
//   Token, token(xq)             once per token and sub-block: work shared by the tile's rows
//   lanes(row, xq, token)        eight int32 lanes summing to the row's integer term
//   accumulate(acc, isum, ...)   the sub-block's multiply-adds for four rows, as the reference

// Q4_K super-block: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
// (sub-blocks 2i and 2i+1 in the low and high nibbles of bytes 32i..32i+31).
struct Q4_KRows {
  static constexpr size_t kBytes = 144;
  static constexpr TensorType kType = TensorType::Q4_K;
  struct Meta {
    alignas(16) float d[4], dmin[4];
    alignas(16) float sc[8][4], m[8][4];
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    for (int r = 0; r < 4; ++r) {
      float sc[8] = {}, m[8] = {};
      out.d[r] = out.dmin[r] = 0;
      if (r < R) {
        const unsigned char* blk = rows + r * row_bytes + static_cast<size_t>(s) * kBytes;
        out.d[r] = half_at(blk);
        out.dmin[r] = half_at(blk + 2);
        q4_k_scales_mins(blk + 4, sc, m);
      }
      for (int j = 0; j < 8; ++j) {
        out.sc[j][r] = sc[j];
        out.m[j][r] = m[j];
      }
    }
  }
  static __m256i weights(const unsigned char* blk, int j) {
    const __m256i v = load256(blk + 16 + 32 * (j / 2));
    return _mm256_and_si256(j % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
  }
  using Row = __m256i;
  struct Token {};
  static Row row(const unsigned char* blk, int j) { return weights(blk, j); }
  static Token token(__m256i) { return {}; }
  static __m256i lanes(Row w, __m256i xq, Token) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, xq); }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int j, const Q8Block& x) {
    const __m128 dx = _mm_broadcast_ss(&x.d);
    // sc * isum and m * sum are exact integers below 2^24, so the float products are exact.
    const __m128 term = _mm_mul_ps(_mm_cvtepi32_ps(isum), _mm_load_ps(mt.sc[j]));
    acc = _mm_fmadd_ps(term, _mm_mul_ps(_mm_load_ps(mt.d), dx), acc);
    const __m128 min_term = _mm_mul_ps(_mm_load_ps(mt.m[j]), _mm_set1_ps(-static_cast<float>(x.sum)));
    return _mm_fmadd_ps(min_term, _mm_mul_ps(_mm_load_ps(mt.dmin), dx), acc);
  }
};

// Q6_K super-block: ql[128] low nibbles, qh[64] high 2 bits, 16 int8 scales (one per 16
// elements), d (f16). Sub-block j = quarter k = j % 4 of half h = j / 4; the weight is q - 32.
struct Q6_KRows {
  static constexpr size_t kBytes = 210;
  static constexpr TensorType kType = TensorType::Q6_K;
  struct Meta {
    alignas(16) float d[4];
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    for (int r = 0; r < 4; ++r)
      out.d[r] = r < R ? half_at(rows + r * row_bytes + static_cast<size_t>(s) * kBytes + 208) : 0;
  }
  static __m256i weights(const unsigned char* blk, int j) {  // q, 0..63
    const int h = j / 4, k = j % 4;
    const __m256i l = load256(blk + 64 * h + 32 * (k & 1));
    const __m256i hb = load256(blk + 128 + 32 * h);
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const __m256i lo = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  // Sub-block j's sum is sc_a * sum_{l<16} (q - 32) x + sc_b * sum_{l>=16} (q - 32) x: lanes 0-3
  // of a vpdpbusd hold the first half, lanes 4-7 the second, so the scales multiply lane-wise.
  struct Row {
    __m256i q;
    __m256i scales;  // int32: lanes 0-3 the first scale, 4-7 the second
  };
  using Token = __m256i;  // 32 * (x_4i + ... + x_4i+3) per int32 lane
  static Row row(const unsigned char* blk, int j) {
    const auto* sc = reinterpret_cast<const signed char*>(blk + 192 + 8 * (j / 4) + 2 * (j % 4));
    return {weights(blk, j), _mm256_set_m128i(_mm_set1_epi32(sc[1]), _mm_set1_epi32(sc[0]))};
  }
  static Token token(__m256i xq) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(32), xq); }
  static __m256i lanes(const Row& r, __m256i xq, Token thirty_two_x) {
    const __m256i qx = _mm256_dpbusd_epi32(_mm256_setzero_si256(), r.q, xq);
    return _mm256_mullo_epi32(_mm256_sub_epi32(qx, thirty_two_x), r.scales);
  }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int, const Q8Block& x) {
    return _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm_load_ps(mt.d), _mm_broadcast_ss(&x.d)), acc);
  }
};

// ---------------------------------------------------------------------------------------------
// Packed tiles.

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
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      typename K::Row w[R];  // decoded once per row, used by every token
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) w[r] = K::row(blk[r], j);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * x_stride + 8 * s + j];
        const __m256i xq = x_bytes(xb);
        const typename K::Token tk = K::token(xq);
        __m256i l[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) l[r] = K::lanes(w[r], xq, tk);
        acc[t] = K::accumulate(acc[t], sum_lanes<R>(l), mt, j, xb);
      }
    }
  }
  store_rows<R, T>(acc, y, y_stride);
}

template <class K, int R, bool kPrefetch>
void k_rows(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
            int64_t n_super, float* y, int64_t y_stride) {
  token_tiles<2>(n_tokens, [&](auto tokens, int64_t t) {
    constexpr int T = decltype(tokens)::value;
    if (t == 0) {
      k_tile<K, R, T, kPrefetch>(rows, row_bytes, x, x_stride, n_super, y, y_stride);
    } else {
      k_tile<K, R, T, false>(rows, row_bytes, x + t * x_stride, x_stride, n_super, y + t * y_stride, y_stride);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Interleaved groups of 16 rows, per super-block: sub-block j's 8 chunks at (8 j + c) *
// kChunkBytes, then the factors below (every lane one row's; rows past the group's end are 0).

// Q4_K: the sub-blocks' scales and mins as floats, then d and dmin.
constexpr size_t kQ4KScales = 8 * 8 * kChunkBytes;                // float [8 sub-blocks][16 rows]
constexpr size_t kQ4KMins = kQ4KScales + 8 * 16 * sizeof(float);  // float [8][16]
constexpr size_t kQ4KD = kQ4KMins + 8 * 16 * sizeof(float);       // float d[16], then dmin[16]
constexpr size_t kQ4KBytes = kQ4KD + 32 * sizeof(float);          // per super-block
// Q6_K: the two int8 scales of every sub-block as floats, then d.
constexpr size_t kQ6KScales = 8 * 8 * kChunkBytes;                 // float [8][2 halves][16 rows]
constexpr size_t kQ6KD = kQ6KScales + 8 * 2 * 16 * sizeof(float);  // float d[16]
constexpr size_t kQ6KBytes = kQ6KD + 16 * sizeof(float);           // per super-block
static_assert(kQ4KBytes % kAlign == 0 && kQ6KBytes % kAlign == 0);

// Sub-block j's weights of the group's n_rows rows (blk[r]: row r's super-block) as chunks.
template <class K>
void store_group_chunks(const unsigned char* const (&blk)[kGroupRows], int n_rows, unsigned char* out) {
  for (int j = 0; j < 8; ++j) {
    store_group_block(
        n_rows, [&](int r) { return K::weights(blk[r], j); }, out + 8 * j * kChunkBytes);
  }
}

void q4_k_group_factors(const unsigned char* const (&blk)[kGroupRows], int n_rows, unsigned char* out) {
  auto* sc = reinterpret_cast<float*>(out + kQ4KScales);
  auto* m = reinterpret_cast<float*>(out + kQ4KMins);
  auto* d = reinterpret_cast<float*>(out + kQ4KD);
  for (int r = 0; r < kGroupRows; ++r) {
    float sc_r[8] = {}, m_r[8] = {};
    d[r] = d[16 + r] = 0;
    if (r < n_rows) {
      d[r] = half_at(blk[r]);
      d[16 + r] = half_at(blk[r] + 2);
      q4_k_scales_mins(blk[r] + 4, sc_r, m_r);
    }
    for (int j = 0; j < 8; ++j) {
      sc[16 * j + r] = sc_r[j];
      m[16 * j + r] = m_r[j];
    }
  }
}

void q6_k_group_factors(const unsigned char* const (&blk)[kGroupRows], int n_rows, unsigned char* out) {
  auto* sc = reinterpret_cast<float*>(out + kQ6KScales);
  auto* d = reinterpret_cast<float*>(out + kQ6KD);
  for (int r = 0; r < kGroupRows; ++r) {
    const auto* scales = r < n_rows ? reinterpret_cast<const signed char*>(blk[r] + 192) : nullptr;
    for (int j = 0; j < 8; ++j) {
      for (int h = 0; h < 2; ++h) sc[32 * j + 16 * h + r] = scales ? scales[8 * (j / 4) + 2 * (j % 4) + h] : 0.f;
    }
    d[r] = scales ? half_at(blk[r] + 208) : 0.f;
  }
}

// Unpacks n_rows (<= 16) rows of n_super super-blocks into the group layout at dst.
template <class K>
void unpack_k_group(const unsigned char* rows, size_t row_bytes, int n_rows, int64_t n_super, unsigned char* dst,
                    bool prefetch_next) {
  for (int64_t s = 0; s < n_super; ++s) {
    if (prefetch_next) prefetch_ahead<kGroupRows * K::kBytes>(rows + kGroupRows * row_bytes, s);
    unsigned char* out = dst + static_cast<size_t>(s) * (K::kType == TensorType::Q4_K ? kQ4KBytes : kQ6KBytes);
    const unsigned char* blk[kGroupRows] = {};
    for (int r = 0; r < n_rows; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * K::kBytes;
    store_group_chunks<K>(blk, n_rows, out);
    if constexpr (K::kType == TensorType::Q4_K) {
      q4_k_group_factors(blk, n_rows, out);
    } else {
      q6_k_group_factors(blk, n_rows, out);
    }
  }
}

// The 8 chunks of sub-block j against T tokens, into sum[t] (which holds its start value).
template <int T>
inline void chunk_sums(const unsigned char* chunks, int c0, int c1, const Q8Block* xj, int64_t x_stride,
                       __m512i (&sum)[T]) {
#pragma GCC unroll 8
  for (int c = c0; c < c1; ++c) {
    const __m512i w = _mm512_load_si512(chunks + c * kChunkBytes);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) sum[t] = _mm512_dpbusd_epi32(sum[t], w, broadcast_chunk(xj[t * x_stride], c));
  }
}

template <int T>
void q4_k_group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_super, float* y,
                     int64_t y_stride, int n_rows) {
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const unsigned char* sb = group + static_cast<size_t>(s) * kQ4KBytes;
    const __m512 d = _mm512_load_ps(sb + kQ4KD), dmin = _mm512_load_ps(sb + kQ4KD + 64);
    for (int j = 0; j < 8; ++j) {
      const Q8Block* xj = x + 8 * s + j;
      __m512i sum[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      chunk_sums<T>(sb + 8 * j * kChunkBytes, 0, 8, xj, x_stride, sum);
      const __m512 sc = _mm512_load_ps(sb + kQ4KScales + 64 * j), m = _mm512_load_ps(sb + kQ4KMins + 64 * j);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = xj[t * x_stride];
        const __m512 dx = _mm512_set1_ps(xb.d);
        const __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[t]), sc);  // exact
        acc[t] = _mm512_fmadd_ps(term, _mm512_mul_ps(d, dx), acc[t]);
        const __m512 min_term = _mm512_mul_ps(m, _mm512_set1_ps(-static_cast<float>(xb.sum)));  // exact
        acc[t] = _mm512_fmadd_ps(min_term, _mm512_mul_ps(dmin, dx), acc[t]);
      }
    }
  }
  store_group<T>(acc, n_rows, y, y_stride);
}

// x_lo: [T tokens][lo_stride] 32 * (the sum of the first 16 activations) of every block.
template <int T>
void q6_k_group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, const int32_t* x_lo,
                     int64_t lo_stride, int64_t n_super, float* y, int64_t y_stride, int n_rows) {
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const unsigned char* sb = group + static_cast<size_t>(s) * kQ6KBytes;
    const __m512 d = _mm512_load_ps(sb + kQ6KD);
    for (int j = 0; j < 8; ++j) {
      const int64_t b = 8 * s + j;
      const Q8Block* xj = x + b;
      // Each half's sum starts at -32 * (its activations' sum), so it ends at sum (q - 32) x.
      __m512i lo[T], hi[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const int32_t l32 = x_lo[t * lo_stride + b];
        lo[t] = _mm512_set1_epi32(-l32);
        hi[t] = _mm512_set1_epi32(l32 - 32 * xj[t * x_stride].sum);
      }
      chunk_sums<T>(sb + 8 * j * kChunkBytes, 0, 4, xj, x_stride, lo);
      chunk_sums<T>(sb + 8 * j * kChunkBytes, 4, 8, xj, x_stride, hi);
      const __m512 sc_a = _mm512_load_ps(sb + kQ6KScales + 128 * j),
                   sc_b = _mm512_load_ps(sb + kQ6KScales + 128 * j + 64);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        // sc_a * lo + sc_b * hi: both products and their sum are integers below 2^24, exact in
        // float, so this is float(the reference's int32 sum).
        const __m512 isum =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[t]), sc_b, _mm512_mul_ps(_mm512_cvtepi32_ps(lo[t]), sc_a));
        acc[t] = _mm512_fmadd_ps(isum, _mm512_mul_ps(d, _mm512_set1_ps(xj[t * x_stride].d)), acc[t]);
      }
    }
  }
  store_group<T>(acc, n_rows, y, y_stride);
}

// out[t * n_blocks + b] = 32 * (x[t][b].q[0] + ... + x[t][b].q[15]).
void half_block_sums(const Q8Block* x, int64_t x_stride, int64_t n_tokens, int64_t n_blocks, int32_t* out) {
  const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      // psadbw against zero sums bytes as unsigned: sum (x + 128) over 16 bytes, less 16 * 128.
      const __m128i q = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t * x_stride + b].q)), flip);
      const __m128i s = _mm_sad_epu8(q, _mm_setzero_si128());
      const int32_t sum = _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128;
      out[t * n_blocks + b] = 32 * sum;
    }
  }
}

template <class K>
void matmul_k_rows(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
                   size_t scratch_bytes) {
  const int64_t n_super = n_blocks / 8;
  unsigned char* group = n_tokens >= kInt8UnpackMinTokens
                             ? aligned_scratch(scratch, scratch_bytes, k_group_bytes(K::kType, n_blocks))
                             : nullptr;
  if (group) {
    int32_t* x_lo = nullptr;
    if constexpr (K::kType == TensorType::Q6_K) {
      x_lo = reinterpret_cast<int32_t*>(group + static_cast<size_t>(n_super) * kQ6KBytes);
      half_block_sums(x, x_stride, n_tokens, n_blocks, x_lo);
    }
    for (int64_t r = 0; r < n_rows; r += kGroupRows) {
      const int nr = static_cast<int>(n_rows - r < kGroupRows ? n_rows - r : kGroupRows);
      unpack_k_group<K>(rows + r * row_bytes, row_bytes, nr, n_super, group, r + 2 * kGroupRows <= n_rows);
      token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
        constexpr int T = decltype(tokens)::value;
        float* yt = y + t * y_stride + r;
        if constexpr (K::kType == TensorType::Q4_K) {
          q4_k_group_tile<T>(group, x + t * x_stride, x_stride, n_super, yt, y_stride, nr);
        } else {
          q6_k_group_tile<T>(group, x + t * x_stride, x_stride, x_lo + t * n_blocks, n_blocks, n_super, yt, y_stride,
                             nr);
        }
      });
    }
    return;
  }
  int64_t r = 0;
  if (r + kTileRows <= n_rows) prefetch_first_tile(rows, row_bytes);
  for (; r + kTileRows <= n_rows; r += kTileRows) {
    k_rows<K, kTileRows, true>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_super, y + r, y_stride);
  }
  for (; r < n_rows; ++r) {
    k_rows<K, 1, false>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_super, y + r, y_stride);
  }
}

}  // namespace

size_t k_group_bytes(TensorType type, int64_t n_blocks) {
  const size_t n_super = static_cast<size_t>(n_blocks / 8);
  if (type == TensorType::Q4_K) return n_super * kQ4KBytes;
  return n_super * kQ6KBytes + static_cast<size_t>(kMaxTokens * n_blocks) * sizeof(int32_t);
}

void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
              size_t scratch_bytes) {
  if (type == TensorType::Q4_K) {
    matmul_k_rows<Q4_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch,
                            scratch_bytes);
  } else {
    matmul_k_rows<Q6_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch,
                            scratch_bytes);
  }
}

}  // namespace peregrine::avx512::int8
