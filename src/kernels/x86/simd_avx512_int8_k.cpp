// AVX-512 VNNI integer dot products of Q4_K / Q5_K / Q6_K weight rows with Q8 activation blocks: the
// K-quant half of avx512::matmul_int8 (simd_avx512_int8_inline.h describes the two kernels). A
// super-block of 256 weights meets 8 activation blocks, one per 32-element sub-block; the
// arithmetic and its order are int8_dot.h's, reproduced bit for bit. Built with the AVX-512 flags.
#include <immintrin.h>

#include <cstring>

#include "kernels/x86/simd_avx512.h"
#include "kernels/x86/simd_avx512_inline.h"
#include "kernels/x86/simd_avx512_int8_inline.h"

namespace peregrine::avx512::int8 {
namespace {

// Q4_K's 8 six-bit scales and mins from the 12 packed bytes at p (ggml's layout: bytes 0-3
// scales 0-3 low 6 bits, 4-7 mins 0-3, 8-11 low nibbles scales 4-7 / high nibbles mins 4-7, with
// the top 2 bits of bytes 0-7 completing fields 4-7), each as a byte: sc[j] = byte j of
// (sc_lo, sc_hi), m[j] likewise.
struct Q4_KScalesMins {
  uint32_t sc_lo, sc_hi, m_lo, m_hi;
  explicit Q4_KScalesMins(const unsigned char* p) {
    uint32_t w[3];
    std::memcpy(w, p, 12);
    const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    sc_lo = w[0] & k6;
    m_lo = w[1] & k6;
    sc_hi = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);
    m_hi = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);
  }
  int32_t sc(int j) const { return static_cast<int32_t>(((j < 4 ? sc_lo : sc_hi) >> (8 * (j % 4))) & 0xff); }
  int32_t m(int j) const { return static_cast<int32_t>(((j < 4 ? m_lo : m_hi) >> (8 * (j % 4))) & 0xff); }
};

// ---------------------------------------------------------------------------------------------
// Decode tiles: 8 rows read in place, two 32-weight sub-blocks of each row per zmm.

constexpr int kTileRows = 8;

// The 32 activations of x0 in the low half of a zmm, x1's in the high half.
inline __m512i x_pair(const Q8Block& x0, const Q8Block& x1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(x_bytes(x0)), x_bytes(x1), 1);
}

// a in lanes 0-7, b in lanes 8-15.
inline __m512 halves(float a, float b) { return _mm512_mask_mov_ps(_mm512_set1_ps(a), 0xFF00, _mm512_set1_ps(b)); }
inline __m512i halves(int32_t a, int32_t b) {
  return _mm512_mask_mov_epi32(_mm512_set1_epi32(a), 0xFF00, _mm512_set1_epi32(b));
}

inline __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }
inline __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// l[k] holds vpdpbusd lanes of two 32-weight pieces (low and high half): a piece's eight int32
// lanes are the sums of its elements 4i..4i+3. Lane i (i < 8) of lo / hi = the sum of the first /
// last four lanes of l[i]'s low half, i.e. of its elements 0-15 / 16-31; lane 8 + i the same for
// l[i]'s high half (exact, in any order). A 16 x 8 transpose folded into the additions.
inline void sum_halves16(const __m512i (&l)[8], __m512i& lo, __m512i& hi) {
  __m512i t[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi32(l[2 * i], l[2 * i + 1]), _mm512_unpackhi_epi32(l[2 * i], l[2 * i + 1]));
  }
  // u[j], 128-bit lanes: pieces 4j..4j+3 over elements 0-15, over 16-31, then the same for the
  // high halves.
  __m512i u[2];
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {
    u[j] =
        _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * j], t[2 * j + 1]), _mm512_unpackhi_epi64(t[2 * j], t[2 * j + 1]));
  }
  lo = _mm512_permutex2var_epi64(u[0], _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), u[1]);
  hi = _mm512_permutex2var_epi64(u[0], _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15), u[1]);
}

// Lane i = the 4 bytes at at(i), or 0 where at(i) is null. Scalar loads packed two to a 64-bit
// register: on Zen 4 a gather (~27 cycles) or a store-and-reload costs more.
template <class At>
[[gnu::always_inline]] inline __m512i load_lanes16(At&& at) {
  return join_lanes([&](int i) {
    uint64_t v[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      uint32_t a = 0, b = 0;
      if (const unsigned char* p = at(4 * i + 2 * h)) std::memcpy(&a, p, 4);
      if (const unsigned char* p = at(4 * i + 2 * h + 1)) std::memcpy(&b, p, 4);
      v[h] = a | static_cast<uint64_t>(b) << 32;
    }
    return _mm_insert_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(v[0])), static_cast<int64_t>(v[1]), 1);
  });
}

// Lane i = the 4 bytes at base + (i % 8) * row_bytes (both halves: the tile's 8 rows), 0 for
// rows at or past n_rows.
inline __m512i load_row_dwords(const unsigned char* base, size_t row_bytes, int n_rows) {
  return load_lanes16([&](int i) { return i % 8 < n_rows ? base + (i % 8) * row_bytes : nullptr; });
}

// The 16 bytes at base + r * row_bytes of the tile's 8 full rows, transposed: out[k] lane i (and
// 8 + i) = dword k of row r = i % 8. Eight 16-byte loads and four permutes in place of
// load_row_dwords' 64 scalar loads.
[[gnu::always_inline]] inline void load_row_heads(const unsigned char* base, size_t row_bytes, __m512i (&out)[4]) {
  const auto row = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + r * row_bytes)); };
  const auto four = [&](int r0) {  // rows r0..r0+3 in the zmm's four 128-bit lanes
    const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(row(r0)), row(r0 + 1), 1);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(row(r0 + 2)), row(r0 + 3), 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  };
  const __m512i lo = four(0), hi = four(4);
  // Row r's dword k: index 4r + k in lo (r < 4), 16 + 4(r - 4) + k in hi; that is 4r + k for all r.
  const __m512i rows4 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) out[k] = _mm512_permutex2var_epi32(lo, _mm512_add_epi32(rows4, _mm512_set1_epi32(k)), hi);
}

// The 16 bytes at base + r * row_bytes of the tile's n_rows rows in load_row_heads' layout (rows
// at or past n_rows: 0).
struct RowHeads {
  __m512i v[4];
};
[[gnu::always_inline]] inline RowHeads row_heads(const unsigned char* base, size_t row_bytes, int n_rows) {
  RowHeads h;
  if (n_rows == kTileRows) {
    load_row_heads(base, row_bytes, h.v);
  } else {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) h.v[k] = load_row_dwords(base + 4 * k, row_bytes, n_rows);
  }
  return h;
}

// The f16 values in the low (kHigh: high) 16 bits of each lane, as floats.
template <bool kHigh = false>
inline __m512 f16_lanes(__m512i v) {
  if constexpr (kHigh) v = _mm512_srli_epi32(v, 16);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

// y[t * y_stride + r] = lane r of acc[t], for r < n_rows.
template <int T>
inline void store_tile(const __m256 (&acc)[T], int n_rows, float* y, int64_t y_stride) {
  const __mmask8 mask = static_cast<__mmask8>((1u << n_rows) - 1u);
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) _mm256_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

// 32 * (x.q[0] + ... + x.q[15]): psadbw against zero sums bytes as unsigned, so the sum of
// (x + 128) over the 16 bytes, less 16 * 128.
inline int32_t thirty_two_x_lo(const Q8Block& x) {
  const __m128i q = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.q)), _mm_set1_epi8(-128));
  const __m128i s = _mm_sad_epu8(q, _mm_setzero_si128());
  return 32 * (_mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128);
}

// The fields of Q4_K / Q5_K super-blocks, one per lane: dd, w0, w1, w2 hold each lane's
// super-block dwords 0 (d, dmin), 1-3 (the 12 bytes of packed scales and mins, Q4_KScalesMins's
// layout); sc_lo / sc_hi hold sub-blocks 0-3 / 4-7's 6-bit scales as bytes, m_lo / m_hi the mins.
struct K4Fields {
  __m512 d, dmin;
  __m512i sc_lo, sc_hi, m_lo, m_hi;
  [[gnu::always_inline]] explicit K4Fields(const RowHeads& h) : K4Fields(h.v[0], h.v[1], h.v[2], h.v[3]) {}
  [[gnu::always_inline]] K4Fields(__m512i dd, __m512i w0, __m512i w1, __m512i w2) {
    d = f16_lanes(dd);
    dmin = f16_lanes<true>(dd);
    const __m512i k6 = _mm512_set1_epi32(0x3f3f3f3f), k4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i k2 = _mm512_set1_epi32(0x03030303);
    sc_lo = _mm512_and_si512(w0, k6);
    m_lo = _mm512_and_si512(w1, k6);
    const __m512i top0 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), k2), 4);
    const __m512i top1 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), k2), 4);
    sc_hi = _mm512_or_si512(_mm512_and_si512(w2, k4), top0);
    m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), k4), top1);
  }
};

// A K-quant format is a policy both kernels call:
//   kBytes, kType            the super-block's bytes and the tensor type
//   weights(blk, j)          sub-block j's 32 weights as unsigned bytes (the group's chunks)
//   weights2(blk, j)         sub-blocks j (low half) and j + 1 (high half), j even (decode tiles;
//                            Q4_K's high half as 16 q, which its accumulate divides back out)
//   Tile(sb, row_bytes, n)   the decode tile's factors of one super-block, lanes i and 8 + i for
//                            row i
//   sub(tile, j)             those of sub-blocks j and j + 1 (lanes 0-7 and 8-15), shared by the
//                            tile's tokens
//   accumulate(acc, lo, hi, tile, sub, x0, x1)
//                            the two sub-blocks' multiply-adds for 8 rows, in the reference's
//                            order: lo / hi are the sums of q * x over elements 0-15 / 16-31, of
//                            sub-block j in lanes 0-7 and j + 1 in lanes 8-15

// Q4_K super-block: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
// (sub-blocks 2i and 2i+1 in the low and high nibbles of bytes 32i..32i+31). Q5_K (kFive): the
// same fields, then 32 bytes of fifth bits (bit j of byte l: element l of sub-block j) before the
// nibbles; weights 0..31, which vpdpbusd takes as they are.
template <bool kFive>
struct K4Rows {
  static constexpr size_t kBytes = kFive ? 176 : 144;
  static constexpr TensorType kType = kFive ? TensorType::Q5_K : TensorType::Q4_K;
  static __m256i weights(const unsigned char* blk, int j) {
    if constexpr (kFive) {
      return simd_x86::q5_k_weights<Tag>(blk, j);
    } else {
      return simd_x86::q4_k_weights<Tag>(blk, j);
    }
  }
  static __m512i weights2(const unsigned char* blk, int j) {
    const __m512i v = _mm512_broadcast_i64x4(load256(blk + (kFive ? 48 : 16) + 32 * (j / 2)));
    if constexpr (!kFive) {
      // The high half keeps its nibbles in place: 16 q, one AND for both halves (kHighTimes16).
      return _mm512_and_si512(v, _mm512_mask_mov_epi32(_mm512_set1_epi8(15), 0xFF00, _mm512_set1_epi8(-16)));
    }
    const __m512i shift = _mm512_mask_mov_epi32(_mm512_setzero_si512(), 0xFF00, _mm512_set1_epi16(4));
    const __m512i low = _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(15));
    if constexpr (!kFive) return low;
    // Fifth bits: bit j of qh for the low half's sub-block, bit j + 1 for the high half's.
    const __m512i h = _mm512_broadcast_i64x4(load256(blk + 16));
    const __m512i bit = _mm512_mask_mov_epi32(_mm512_set1_epi16(static_cast<int16_t>(j)), 0xFF00,
                                              _mm512_set1_epi16(static_cast<int16_t>(j + 1)));
    const __m512i fifth = _mm512_and_si512(_mm512_srlv_epi16(h, bit), _mm512_set1_epi8(1));
    return _mm512_or_si512(low, _mm512_slli_epi16(fifth, 4));
  }
  // Q4_KScalesMins for the tile's rows, lanes i and 8 + i for row i.
  struct Tile : K4Fields {
    [[gnu::always_inline]] Tile(const unsigned char* sb, size_t row_bytes, int n_rows)
        : K4Fields(row_heads(sb, row_bytes, n_rows)) {}
  };
  struct Sub {
    __m512 sc, m;
  };
  static Sub sub(const Tile& f, int j) {
    // Sub-blocks j and j + 1 are bytes j % 4 and j % 4 + 1 of the same word.
    const __m512i byte = _mm512_set1_epi32(0xff);
    const __m512i shift = halves(8 * (j % 4), 8 * (j % 4) + 8);
    return {_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(j < 4 ? f.sc_lo : f.sc_hi, shift), byte)),
            _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(j < 4 ? f.m_lo : f.m_hi, shift), byte))};
  }
  static __m256 accumulate(__m256 acc, __m512i lo, __m512i hi, const Tile& f, const Sub& sj, const Q8Block& x0,
                           const Q8Block& x1) {
    const __m512 dx = halves(x0.d, x1.d);
    __m512i isum = _mm512_add_epi32(lo, hi);
    // Q4_K's high half (sub-block j + 1) was dotted with 16 q: every lane a multiple of 16, so
    // the shift is exact.
    if constexpr (!kFive) isum = _mm512_mask_srai_epi32(isum, 0xFF00, isum, 4);
    // sc * isum and m * sum are exact integers below 2^24, so the float products are exact.
    const __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), sj.sc);
    const __m512 min_term = _mm512_mul_ps(sj.m, halves(-static_cast<float>(x0.sum), -static_cast<float>(x1.sum)));
    const __m512 d_dx = _mm512_mul_ps(f.d, dx), dmin_dx = _mm512_mul_ps(f.dmin, dx);
    acc = _mm256_fmadd_ps(low_half(term), low_half(d_dx), acc);
    acc = _mm256_fmadd_ps(low_half(min_term), low_half(dmin_dx), acc);
    acc = _mm256_fmadd_ps(high_half(term), high_half(d_dx), acc);
    return _mm256_fmadd_ps(high_half(min_term), high_half(dmin_dx), acc);
  }
};

using Q4_KRows = K4Rows<false>;
using Q5_KRows = K4Rows<true>;

// Scales and mins as Q4_K's (Q4_K, Q5_K).
constexpr bool k4_scales(TensorType t) { return t == TensorType::Q4_K || t == TensorType::Q5_K; }

// Q6_K super-block: ql[128] low nibbles, qh[64] high 2 bits, 16 int8 scales (one per 16
// elements), d (f16). Sub-block j = quarter k = j % 4 of half h = j / 4; the weight is q - 32.
struct Q6_KRows {
  static constexpr size_t kBytes = 210;
  static constexpr TensorType kType = TensorType::Q6_K;
  static __m256i weights(const unsigned char* blk, int j) { return simd_x86::q6_k_weights<Tag>(blk, j); }  // 0..63
  static __m512i weights2(const unsigned char* blk, int j) {
    // Sub-blocks 4h + k and 4h + k + 1 (k = 0 or 2) take the low (k = 0) or high nibbles of
    // ql[64h..64h+31] and ql[64h+32..64h+63], and bits 2k, 2k + 2 of the same qh bytes.
    const int h = j / 4, k = j % 4;
    const __m512i l = _mm512_loadu_si512(blk + 64 * h);
    const __m512i hb = _mm512_broadcast_i64x4(load256(blk + 128 + 32 * h));
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    const __m512i lo = _mm512_and_si512(k < 2 ? l : _mm512_srli_epi16(l, 4), m4);
    const __m512i shift = _mm512_mask_mov_epi32(_mm512_set1_epi16(static_cast<int16_t>(2 * k)), 0xFF00,
                                                _mm512_set1_epi16(static_cast<int16_t>(2 * k + 2)));
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(hb, shift), m2);
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
  }
  struct Tile {
    __m512 d;
    __m512i sc[4];  // the 16 int8 scales, four per lane
    Tile(const unsigned char* sb, size_t row_bytes, int n_rows) {
      d = f16_lanes<true>(load_row_dwords(sb + 206, row_bytes, n_rows));  // d is bytes 208-209
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) sc[i] = load_row_dwords(sb + 192 + 4 * i, row_bytes, n_rows);
    }
  };
  struct Sub {
    __m512 a, b;  // the scales of elements 0-15 and 16-31 as floats
  };
  static Sub sub(const Tile& f, int j) {
    // Sub-block 4h + k (k even) takes scales 8h + 2k, 8h + 2k + 1: bytes 0 and 1 of dword
    // 2h + k / 2; sub-block 4h + k + 1 bytes 2 and 3.
    const int h = j / 4, k = j % 4;
    const __m512i g = f.sc[2 * h + k / 2];
    const __m512i a = _mm512_srai_epi32(_mm512_sllv_epi32(g, halves(24, 8)), 24);
    const __m512i b = _mm512_srai_epi32(_mm512_sllv_epi32(g, halves(16, 0)), 24);
    return {_mm512_cvtepi32_ps(a), _mm512_cvtepi32_ps(b)};
  }
  static __m256 accumulate(__m256 acc, __m512i lo, __m512i hi, const Tile& f, const Sub& sj, const Q8Block& x0,
                           const Q8Block& x1) {
    // Each half less 32 * (its activations' sum) is sum (q - 32) x; then sc_a * lo + sc_b * hi:
    // both products and their sum are integers below 2^24, exact in float, so this is
    // float(the reference's int32 sum).
    const int32_t lo0 = thirty_two_x_lo(x0), lo1 = thirty_two_x_lo(x1);
    const __m512 a = _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, halves(lo0, lo1)));
    const __m512 b = _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, halves(32 * x0.sum - lo0, 32 * x1.sum - lo1)));
    const __m512 isum = _mm512_fmadd_ps(b, sj.b, _mm512_mul_ps(a, sj.a));
    const __m512 d_dx = _mm512_mul_ps(f.d, halves(x0.d, x1.d));
    acc = _mm256_fmadd_ps(low_half(isum), low_half(d_dx), acc);
    return _mm256_fmadd_ps(high_half(isum), high_half(d_dx), acc);
  }
};

// ---------------------------------------------------------------------------------------------
// Decode tiles.

// y[t * y_stride + r] = dot(row r, token t) for the n_rows (<= 8; kFull: 8) K-quant rows at
// `rows` and T tokens, two sub-blocks per step. next: when not null, 8 rows to prefetch into L2 as
// the tile goes, a quarter super-block's worth per step (matmul_k_rows passes those two tiles ahead).
template <class K, int T, bool kFull>
void k_decode_tile(const unsigned char* rows, size_t row_bytes, int n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_super, float* y, int64_t y_stride, const unsigned char* next) {
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const int nr = kFull ? kTileRows : n_rows;
  for (int64_t s = 0; s < n_super; ++s) {
    const unsigned char* sb = rows + static_cast<size_t>(s) * K::kBytes;
    const typename K::Tile f(sb, row_bytes, nr);
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
      if (next) prefetch_ahead<kTileRows * K::kBytes / 4, _MM_HINT_T1>(next, 4 * s + j / 2);
      const typename K::Sub fj = K::sub(f, j);
      __m512i w[8];  // decoded once per row, used by every token
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) w[k] = kFull || k < nr ? K::weights2(sb + k * row_bytes, j) : _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const Q8Block& x0 = x[t * x_stride + 8 * s + j];
        const Q8Block& x1 = x[t * x_stride + 8 * s + j + 1];
        const __m512i xq = x_pair(x0, x1);
        __m512i l[8], lo, hi;
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) l[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[k], xq);
        sum_halves16(l, lo, hi);
        acc[t] = K::accumulate(acc[t], lo, hi, f, fj, x0, x1);
      }
    }
  }
  store_tile<T>(acc, nr, y, y_stride);
}

template <class K>
void k_decode_rows(const unsigned char* rows, size_t row_bytes, int n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_super, float* y, int64_t y_stride, const unsigned char* next) {
  token_tiles<2>(n_tokens, [&](auto tokens, int64_t t) {
    constexpr int T = decltype(tokens)::value;
    const Q8Block* xt = x + t * x_stride;
    float* yt = y + t * y_stride;
    const unsigned char* pf = t == 0 ? next : nullptr;  // later tokens find the rows in cache
    if (n_rows == kTileRows) {
      k_decode_tile<K, T, true>(rows, row_bytes, n_rows, xt, x_stride, n_super, yt, y_stride, pf);
    } else {
      k_decode_tile<K, T, false>(rows, row_bytes, n_rows, xt, x_stride, n_super, yt, y_stride, pf);
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

constexpr unsigned char kZeroBytes[12] = {};

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
    const bool real = r < n_rows;
    d[r] = real ? half_at(blk[r]) : 0.f;
    d[16 + r] = real ? half_at(blk[r] + 2) : 0.f;
    const Q4_KScalesMins f(real ? blk[r] + 4 : kZeroBytes);
    for (int j = 0; j < 8; ++j) {
      sc[16 * j + r] = static_cast<float>(f.sc(j));
      m[16 * j + r] = static_cast<float>(f.m(j));
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
    unsigned char* out = dst + static_cast<size_t>(s) * (k4_scales(K::kType) ? kQ4KBytes : kQ6KBytes);
    const unsigned char* blk[kGroupRows] = {};
    for (int r = 0; r < n_rows; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * K::kBytes;
    store_group_chunks<K>(blk, n_rows, out);
    if constexpr (k4_scales(K::kType)) {
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
    for (int t = 0; t < T; ++t) sum[t] = dpbusd_chunk(sum[t], w, xj[t * x_stride], c);
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
        // fma(-(m * sum), dmin * dx, acc) as fnmadd of the exact m * sum: the same bits, and the
        // sum broadcast from memory and converted in the vector unit, no scalar round trip.
        const __m512 min_term = _mm512_mul_ps(m, _mm512_cvtepi32_ps(_mm512_set1_epi32(xb.sum)));  // exact
        acc[t] = _mm512_fnmadd_ps(min_term, _mm512_mul_ps(dmin, dx), acc[t]);
      }
    }
  }
  store_group<T>(acc, n_rows, y, y_stride);
}

// Fused Q4_K / Q5_K groups (few tokens): per super-block the 16 rows' scales and mins are decoded
// in the lanes of a few registers (K4Fields) and each sub-block's weights are interleaved in
// registers (group_block) and dotted with every token at once, straight from the streaming rows;
// the arithmetic is q4_k_group_tile's. next: the rows after these, prefetched over the
// super-blocks (null: none).
template <class K, int T>
void fused_k4_group(const unsigned char* rows, size_t row_bytes, int n_rows, const Q8Block* x, int64_t x_stride,
                    int64_t n_super, float* y, int64_t y_stride, const unsigned char* next) {
  __m512 acc[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    if (next) prefetch_ahead<kGroupRows * K::kBytes>(next, s);
    const unsigned char* blk[kGroupRows] = {};
    for (int r = 0; r < n_rows; ++r) blk[r] = rows + r * row_bytes + static_cast<size_t>(s) * K::kBytes;
    const auto dwords = [&](int off) { return load_lanes16([&](int r) { return blk[r] ? blk[r] + off : nullptr; }); };
    const K4Fields f(dwords(0), dwords(4), dwords(8), dwords(12));
    const __m512 d = f.d, dmin = f.dmin;
    const __m512i byte = _mm512_set1_epi32(0xff);
    alignas(64) __m512i packed[8];  // Q4_K: sub-blocks j and j + 1's bytes in group_block's chunks
    for (int j = 0; j < 8; ++j) {
      __m512i w[8];
      if constexpr (K::kType == TensorType::Q4_K) {
        // Sub-blocks j and j + 1 share their bytes (low and high nibbles): one transpose for both,
        // and the nibbles split after it, 16 rows per instruction.
        const __m512i nibble = _mm512_set1_epi8(15);
        if (j % 2 == 0) {
          group_block(
              n_rows, [&](int r) { return load256(blk[r] + 16 + 32 * (j / 2)); }, packed);
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c) w[c] = _mm512_and_si512(packed[c], nibble);
        } else {
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c) w[c] = _mm512_and_si512(_mm512_srli_epi16(packed[c], 4), nibble);
        }
      } else {
        group_block(
            n_rows, [&](int r) { return K::weights(blk[r], j); }, w);
      }
      // -sum(x) of every token as a float in memory: a broadcast load, not a conversion and a
      // broadcast from a general register per token.
      alignas(64) float neg_xsum[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) neg_xsum[t] = -static_cast<float>(x[t * x_stride + 8 * s + j].sum);
      const __m512 sc =
          _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(j < 4 ? f.sc_lo : f.sc_hi, 8 * (j % 4)), byte));
      const __m512 m =
          _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(j < 4 ? f.m_lo : f.m_hi, 8 * (j % 4)), byte));
      const Q8Block* xj = x + 8 * s + j;
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const Q8Block& xb = xj[t * x_stride];
        __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) sum = dpbusd_chunk(sum, w[c], xb, c);
        const __m512 dx = _mm512_set1_ps(xb.d);
        const __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), sc);  // exact
        acc[t] = _mm512_fmadd_ps(term, _mm512_mul_ps(d, dx), acc[t]);
        const __m512 min_term = _mm512_mul_ps(m, _mm512_set1_ps(neg_xsum[t]));  // exact
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
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t b = 0; b < n_blocks; ++b) out[t * n_blocks + b] = thirty_two_x_lo(x[t * x_stride + b]);
  }
}

template <class K>
void matmul_k_rows(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
                   size_t scratch_bytes) {
  const int64_t n_super = n_blocks / 8;
  if constexpr (k4_scales(K::kType)) {
    if (n_tokens >= int8_few_min_tokens(K::kType) && n_tokens <= kInt8FewMaxTokens) {
      return fused_row_groups<kInt8FewMaxTokens>(
          rows, row_bytes, n_rows, n_tokens, [&](auto tokens, int64_t r, int nr, const unsigned char* next) {
            fused_k4_group<K, decltype(tokens)::value>(rows + r * row_bytes, row_bytes, nr, x, x_stride, n_super, y + r,
                                                       y_stride, next);
          });
    }
  }
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
        if constexpr (k4_scales(K::kType)) {
          q4_k_group_tile<T>(group, x + t * x_stride, x_stride, n_super, yt, y_stride, nr);
        } else {
          q6_k_group_tile<T>(group, x + t * x_stride, x_stride, x_lo + t * n_blocks, n_blocks, n_super, yt, y_stride,
                             nr);
        }
      });
    }
    return;
  }
  // Prefetching two tiles ahead into L2 (not one tile into L1) took Q4_K decode on tinyllama from
  // ~35 to ~51 tok/s; into L1 two tiles gave ~43, three was slower; into L2 one tile ~48, three
  // ~50 (docs/performance-history.md).
  prefetch_first_rows(rows, row_bytes, n_rows < 2 * kTileRows ? n_rows : 2 * kTileRows);
  for (int64_t r = 0; r < n_rows; r += kTileRows) {
    const int nr = static_cast<int>(n_rows - r < kTileRows ? n_rows - r : kTileRows);
    const unsigned char* next = r + 3 * kTileRows <= n_rows ? rows + (r + 2 * kTileRows) * row_bytes : nullptr;
    k_decode_rows<K>(rows + r * row_bytes, row_bytes, nr, x, x_stride, n_tokens, n_super, y + r, y_stride, next);
  }
}

}  // namespace

size_t k_group_bytes(TensorType type, int64_t n_blocks) {
  const size_t n_super = static_cast<size_t>(n_blocks / 8);
  if (k4_scales(type)) return n_super * kQ4KBytes;
  return n_super * kQ6KBytes + static_cast<size_t>(kMaxTokens * n_blocks) * sizeof(int32_t);
}

void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
              size_t scratch_bytes) {
  if (type == TensorType::Q4_K) {
    matmul_k_rows<Q4_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch,
                            scratch_bytes);
  } else if (type == TensorType::Q5_K) {
    matmul_k_rows<Q5_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch,
                            scratch_bytes);
  } else {
    matmul_k_rows<Q6_KRows>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch,
                            scratch_bytes);
  }
}

}  // namespace peregrine::avx512::int8
