// AVX2 integer dot products of Q4_K / Q5_K / Q6_K weight rows with Q8 activation blocks: the K-quant
// half of matmul_int8 (simd_avx2_int8.cpp describes the two kernels; these follow the same
// plan). A super-block of 256 weights meets 8 activation blocks, one per 32-element sub-block;
// the arithmetic and its order are int8_dot.h's, reproduced bit for bit. Built with -mavx2 -mfma
// -mf16c.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/simd_avx2_inline.h"
#include "kernels/x86/simd_avx2_int8_inline.h"

namespace peregrine::avx2::int8 {
namespace {

// Packed tiles of 4 (or 1) rows x T tokens (sub_block_tile, simd_avx2_int8_inline.h): per sub-block each row's eight
// lanes, added across the rows, then the sub-block's multiply-adds once per four rows.

// Q4_K super-block: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
// (sub-blocks 2i and 2i+1 in the low and high nibbles of bytes 32i..32i+31). Q5_K: the same
// fields, then 32 bytes of fifth bits before the nibbles (kFive; weights 0..31).
template <bool kFive>
struct K4Rows {
  static constexpr size_t kBytes = kFive ? 176 : 144;
  static constexpr int kSub = 8;
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
    if constexpr (kFive) {
      return simd_x86::q5_k_weights<Tag>(blk, j);
    } else {
      return simd_x86::q4_k_weights<Tag>(blk, j);
    }
  }
  using Row = __m256i;  // sub-block j's weights
  struct Token {};
  static Row row(const unsigned char* blk, int j) { return weights(blk, j); }
  static Token token(const Q8Block&) { return {}; }
  static __m256i lanes(Row w, const Q8Block& x, Token) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, load(x.q)), _mm256_set1_epi16(1));
  }
  // acc += this sub-block for four rows, as the reference: the scale and the min term.
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int j, const Q8Block& x, Token) {
    const __m128 dx = _mm_broadcast_ss(&x.d);
    const __m128 sc = _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mt.sc[j])));
    const __m128 m = _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mt.m[j])));
    // sc * isum and m * sum are exact integers below 2^24, so the float products are exact.
    acc = _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(isum), sc), _mm_mul_ps(_mm_load_ps(mt.d), dx), acc);
    const __m128 min_term = _mm_mul_ps(m, _mm_set1_ps(-static_cast<float>(x.sum)));
    return _mm_fmadd_ps(min_term, _mm_mul_ps(_mm_load_ps(mt.dmin), dx), acc);
  }
};
using Q4_KRows = K4Rows<false>;
using Q5_KRows = K4Rows<true>;

// Q6_K super-block: ql[128] low nibbles, qh[64] high 2 bits, 16 int8 scales (one per 16
// elements), d (f16). Sub-block j = quarter k = j % 4 of half h = j / 4.
struct Q6_KRows {
  static constexpr size_t kBytes = 210;
  static constexpr int kSub = 8;
  struct Meta {
    alignas(16) float d[4];
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    for (int r = 0; r < 4; ++r)
      out.d[r] = r < R ? half(rows + r * row_bytes + static_cast<size_t>(s) * kBytes + 208) : 0;
  }
  static __m256i weights(const unsigned char* blk, int j) { return simd_x86::q6_k_weights<Tag>(blk, j); }  // 0..63
  // Lanes of sc * sum (q - 32) x: unsigned q times x, minus 32 x per pair (|.| <= 8128), times
  // the half's scale in vpmaddwd (elements 0-15 take the first scale, 16-31 the second).
  struct Row {
    __m256i w;       // sub-block j's weights, 0..63
    __m256i scales;  // its two int8 scales as int16: elements 0-15 take the first, 16-31 the second
  };
  using Token = __m256i;  // 32 (x_2k + x_2k+1) as int16 pairs
  static Row row(const unsigned char* blk, int j) {
    const auto* sc = reinterpret_cast<const signed char*>(blk + 192 + 8 * (j / 4) + 2 * (j % 4));
    return {weights(blk, j), _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]))};
  }
  static Token token(const Q8Block& x) { return _mm256_maddubs_epi16(_mm256_set1_epi8(32), load(x.q)); }
  static __m256i lanes(const Row& r, const Q8Block& x, Token thirty_two_x) {
    const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(r.w, load(x.q)), thirty_two_x);
    return _mm256_madd_epi16(pairs, r.scales);
  }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int, const Q8Block& x, Token) {
    return _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm_load_ps(mt.d), _mm_broadcast_ss(&x.d)), acc);
  }
};

// Q4_K / Q5_K batches: groups of 8 rows unpacked per super-block into 8 sub-blocks x 8 interleaved
// chunks (as the Q8_0/Q4_0 groups), then per sub-block the 8 rows' scales and mins as floats, and
// the rows' d and dmin. Q4_K's integer sums stay in int16 for a whole sub-block (|q x| pair sums
// <= 3810, eight chunks <= 30480), Q5_K's for half of one (k4_group_tile).
constexpr size_t kQ4KGroupScales = 8 * 8 * kChunkBytes;  // after the chunks
constexpr size_t kQ4KGroupMins = kQ4KGroupScales + 8 * 8 * sizeof(float);
constexpr size_t kQ4KGroupD = kQ4KGroupMins + 8 * 8 * sizeof(float);  // d[8], then dmin[8]
constexpr size_t kQ4KGroupBytes = kQ4KGroupD + 16 * sizeof(float);    // per super-block

// The group layout's weights for one super-block of 8 rows (blk[r]: row r's super-block):
// sub-block j's 8 chunks at out + (8 j + c) * kChunkBytes, chunk c holding each row's weights
// 4c..4c+3 (the Q4_K and Q6_K groups share it).
template <class K>
void store_group_chunks(const unsigned char* const (&blk)[8], unsigned char* out) {
  for (int j = 0; j < 8; ++j) {
    __m256i v[8];
    for (int r = 0; r < 8; ++r) v[r] = K::weights(blk[r], j);
    transpose_8x8_epi32(v);
    for (int c = 0; c < 8; ++c) _mm256_store_si256(reinterpret_cast<__m256i*>(out + (8 * j + c) * kChunkBytes), v[c]);
  }
}

// K: Q4_KRows or Q5_KRows (the same layout of scales; Q5_K's weights are 0..31).
template <class K>
void unpack_k4_group(const unsigned char* rows, size_t row_bytes, int64_t n_super, unsigned char* dst) {
  for (int64_t s = 0; s < n_super; ++s) {
    prefetch_ahead<kGroupRows * K::kBytes>(rows + kGroupRows * row_bytes, s);
    unsigned char* out = dst + static_cast<size_t>(s) * kQ4KGroupBytes;
    const unsigned char* blk[8];
    for (int r = 0; r < 8; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * K::kBytes;
    store_group_chunks<K>(blk, out);
    typename K::Meta lo, hi;
    K::template meta<4>(rows, row_bytes, s, lo);
    K::template meta<4>(rows + 4 * row_bytes, row_bytes, s, hi);
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

// kFive (Q5_K): |q x| pair sums reach 2 * 31 * 127 = 7874, so the int16 sums are widened to
// int32 after every four chunks (4 * 7874 fits int16, 8 * 7874 does not); exact either way.
template <bool kFive, int T>
void k4_group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_super, float* y,
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
      __m256i sum[T], wide[T];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + (8 * j + c) * kChunkBytes));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_maddubs_epi16(w, broadcast_chunk(x[t * x_stride + 8 * s + j], c));
          sum[t] = c == 0 || (kFive && c == 4) ? p : _mm256_add_epi16(sum[t], p);
          if (kFive && c == 3) wide[t] = _mm256_madd_epi16(sum[t], ones);
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        wide[t] = kFive ? _mm256_add_epi32(wide[t], _mm256_madd_epi16(sum[t], ones)) : _mm256_madd_epi16(sum[t], ones);
      }
      const __m256 sc = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ4KGroupScales) + 8 * j);
      const __m256 m = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ4KGroupMins) + 8 * j);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * x_stride + 8 * s + j];
        const __m256 dx = _mm256_broadcast_ss(&xb.d);
        const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(wide[t]), sc);  // exact
        acc[t] = _mm256_fmadd_ps(term, _mm256_mul_ps(d, dx), acc[t]);
        const __m256 min_term = _mm256_mul_ps(m, _mm256_set1_ps(-static_cast<float>(xb.sum)));  // exact
        acc[t] = _mm256_fmadd_ps(min_term, _mm256_mul_ps(dmin, dx), acc[t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

// Q6_K batches: the same groups; per sub-block, the 8 rows' two int8 scales as int16 vectors
// for vpmaddwd (chunks 0-3 take the first scale, 4-7 the second; each row's two int16 lanes hold
// its scale), then the rows' d. (q - 32) x pair sums are <= 8128, so four chunks (one scale's
// half) stay in int16.
constexpr size_t kQ6KGroupScales = 8 * 8 * kChunkBytes;               // after the chunks
constexpr size_t kQ6KGroupD = kQ6KGroupScales + 8 * 2 * kChunkBytes;  // d[8]
constexpr size_t kQ6KGroupBytes = kQ6KGroupD + 8 * sizeof(float);     // per super-block

void unpack_q6_k_group(const unsigned char* rows, size_t row_bytes, int64_t n_super, unsigned char* dst) {
  for (int64_t s = 0; s < n_super; ++s) {
    prefetch_ahead<kGroupRows * Q6_KRows::kBytes>(rows + kGroupRows * row_bytes, s);
    unsigned char* out = dst + static_cast<size_t>(s) * kQ6KGroupBytes;
    const unsigned char* blk[8];
    for (int r = 0; r < 8; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * Q6_KRows::kBytes;
    auto* scales = reinterpret_cast<int16_t*>(out + kQ6KGroupScales);  // [sub-block][half][row][2]
    auto* d = reinterpret_cast<float*>(out + kQ6KGroupD);
    store_group_chunks<Q6_KRows>(blk, out);
    for (int j = 0; j < 8; ++j) {
      for (int r = 0; r < 8; ++r) {
        const auto* sc = reinterpret_cast<const signed char*>(blk[r] + 192 + 8 * (j / 4) + 2 * (j % 4));
        for (int half_ = 0; half_ < 2; ++half_) {
          scales[(2 * j + half_) * 16 + 2 * r] = sc[half_];
          scales[(2 * j + half_) * 16 + 2 * r + 1] = sc[half_];
        }
      }
    }
    for (int r = 0; r < 8; ++r) d[r] = half(blk[r] + 208);
  }
}

template <int T>
void q6_k_group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_super, float* y,
                     int64_t y_stride) {
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i k32 = _mm256_set1_epi8(32);
  for (int64_t s = 0; s < n_super; ++s) {
    const unsigned char* sb = group + static_cast<size_t>(s) * kQ6KGroupBytes;
    const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(sb + kQ6KGroupD));
    for (int j = 0; j < 8; ++j) {
      __m256i isum[T];
#pragma GCC unroll 2
      for (int half_ = 0; half_ < 2; ++half_) {
        __m256i sum[T];
#pragma GCC unroll 4
        for (int c = 4 * half_; c < 4 * half_ + 4; ++c) {
          const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + (8 * j + c) * kChunkBytes));
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const __m256i xc = broadcast_chunk(x[t * x_stride + 8 * s + j], c);
            const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w, xc), _mm256_maddubs_epi16(k32, xc));
            sum[t] = c == 4 * half_ ? p : _mm256_add_epi16(sum[t], p);
          }
        }
        const __m256i sc =
            _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + kQ6KGroupScales + (2 * j + half_) * kChunkBytes));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i part = _mm256_madd_epi16(sum[t], sc);
          isum[t] = half_ == 0 ? part : _mm256_add_epi32(isum[t], part);
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = x[t * x_stride + 8 * s + j];
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, _mm256_broadcast_ss(&xb.d)), acc[t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

template <class K>
void matmul_k_rows(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::span<std::byte> scratch) {
  const int64_t n_super = n_blocks / 8;
  int64_t r = 0;
  constexpr TensorType kType = std::is_same_v<K, Q4_KRows>   ? TensorType::Q4_K
                               : std::is_same_v<K, Q5_KRows> ? TensorType::Q5_K
                                                             : TensorType::Q6_K;
  if (n_tokens >= kInt8UnpackMinTokens && scratch.size() >= int8_unpack_scratch_bytes(kType, n_blocks)) {
    auto* group = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 31) / 32 * 32);
    for (; r + kGroupRows <= n_rows; r += kGroupRows) {
      const unsigned char* g_rows = rows + r * row_bytes;
      if constexpr (kType != TensorType::Q6_K) {
        constexpr bool kFive = kType == TensorType::Q5_K;
        unpack_k4_group<K>(g_rows, row_bytes, n_super, group);
        token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
          k4_group_tile<kFive, decltype(tokens)::value>(group, x + t * x_stride, x_stride, n_super,
                                                        y + t * y_stride + r, y_stride);
        });
      } else {
        unpack_q6_k_group(g_rows, row_bytes, n_super, group);
        token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
          q6_k_group_tile<decltype(tokens)::value>(group, x + t * x_stride, x_stride, n_super, y + t * y_stride + r,
                                                   y_stride);
        });
      }
    }
  }
  sub_block_rows<K>(rows + r * row_bytes, row_bytes, n_rows - r, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
}

}  // namespace

size_t k_group_bytes(TensorType type, int64_t n_blocks) {
  return static_cast<size_t>(n_blocks / 8) * (type == TensorType::Q6_K ? kQ6KGroupBytes : kQ4KGroupBytes);
}

void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
              std::span<std::byte> scratch) {
  if (type == TensorType::Q4_K) {
    matmul_k_rows<Q4_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  } else if (type == TensorType::Q5_K) {
    matmul_k_rows<Q5_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  } else {
    matmul_k_rows<Q6_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  }
}

}  // namespace peregrine::avx2::int8
