#pragma once
// Helpers written once for every x86 SIMD path (simd_avx2*.cpp, simd_avx512*.cpp), on 256-bit
// vectors. Include only from those files.
//
// Each function is a template on the calling path's tag type (avx2::Tag, avx512::Tag), so every
// path instantiates its own copy, compiled with its own flags under its own name: the linker can
// never hand the AVX-512 build of a helper to the AVX2 path, as it could pick either copy of one
// plain inline function compiled in both.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace peregrine::simd_x86 {

// Horizontal sum in a fixed tree: ((0+4)+(2+6)) + ((1+5)+(3+7)). Part of every float reduction
// order the kernels document, so do not change it.
template <class Tag>
inline float hsum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);           // (0+4, 1+5, 2+6, 3+7)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));  // (0+4+2+6, 1+5+3+7)
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The f16 value stored (little-endian, possibly unaligned) at p.
template <class Tag>
inline float half_at(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Lane r (r < R) of the result = the sum of the eight int32 lanes of l[r] (exact, so the order
// of the additions does not matter). R is 4 or 1.
template <class Tag, int R>
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

// The f16 scales starting block b of R packed rows (blocks of kBytes) as four floats (lanes >= R
// are 0).
template <class Tag, size_t kBytes, int R>
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

// Prefetches, over a tile's steps, the rows that follow it (kStep bytes of them per step b): the
// rows are short (1-3 KB), so the hardware prefetcher sees several brief streams per tile and never
// gets ahead; prefetching one tile ahead nearly doubled batch-1 decode (AVX2, measured).
// kHint: the cache level (_MM_HINT_T0: L1; the AVX-512 K-quant decode tile prefetches further
// ahead into L2 with _MM_HINT_T1).
template <class Tag, size_t kStep, _mm_hint kHint = _MM_HINT_T0>
inline void prefetch_ahead(const unsigned char* next, int64_t b) {
  const char* p = reinterpret_cast<const char*>(next + static_cast<size_t>(b) * kStep);
#pragma GCC unroll 16
  for (size_t off = 0; off < kStep; off += 64) _mm_prefetch(p + off, kHint);
}

// Sub-block j's 32 weights of a Q4_K super-block (format/tensor_type.cpp: sub-blocks 2i and 2i+1
// in the low and high nibbles of bytes 16 + 32i..), 0..15 as bytes.
template <class Tag>
inline __m256i q4_k_weights(const unsigned char* blk, int j) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * (j / 2)));
  return _mm256_and_si256(j % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
}

// Sub-block j's 32 weights q = w + 32 of a Q6_K super-block (ql[128] low nibbles, qh[64] high 2
// bits; sub-block j = quarter k = j % 4 of half h = j / 4), 0..63 as bytes.
template <class Tag>
inline __m256i q6_k_weights(const unsigned char* blk, int j) {
  const int h = j / 4, k = j % 4;
  const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (k & 1)));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
  const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
  const __m256i lo = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

// ---- Weight decoders of the types beyond Q8_0/Q4_0/Q4_K/Q6_K (layouts: format/quant_blocks.h):
// each returns one 32-weight (sub-)block as 32 bytes in element order.

// 32 nibbles of a Q4_0-style array qs (element j < 16: low nibble of qs[j], j >= 16: high
// nibble of qs[j - 16]), 0..15.
template <class Tag>
inline __m256i nibbles32(const unsigned char* qs) {
  // Both 128-bit halves get the 16 bytes; the high half shifts right by 4 to bring the high
  // nibbles down, and one mask keeps the nibbles.
  const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(15));
}

// 0x10 in byte j where bit j of the little-endian 32-bit word at p is set, else 0 (Q5_0/Q5_1's qh).
template <class Tag>
inline __m256i fifth_bits32(const unsigned char* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  // Byte j gets byte j / 8 of the word, then keeps bit j % 8.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)),
                          _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Bit `shift` of each of the 32 bytes at p, as 0 or 1 (shift < 8).
template <class Tag>
inline __m256i bit_of_bytes(const unsigned char* p, int shift) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8(1));
}

// The 16 IQ4 table values (format/quant_blocks.h's kIq4nlValues) in both 128-bit halves, for
// vpshufb lookups by nibble.
template <class Tag>
inline __m256i iq4_table() {
  return _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, -127, -104, -83,
                          -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}

// Sub-block j's 32 weights q of a Q5_K super-block (nibbles as Q4_K at byte 48, fifth bit j of
// qh[l] at byte 16), 0..31.
template <class Tag>
inline __m256i q5_k_weights(const unsigned char* blk, int j) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 48 + 32 * (j / 2)));
  const __m256i lo = _mm256_and_si256(j % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
  return _mm256_or_si256(lo, _mm256_slli_epi16(bit_of_bytes<Tag>(blk + 16, j), 4));
}

// Sub-block j's two low bits of a Q2_K / Q3_K qs array (quarter j % 4 of the 32 bytes of half j / 4), 0..3.
template <class Tag>
inline __m256i two_bit_weights(const unsigned char* qs, int j) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (j / 4)));
  return _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j % 4)), _mm256_set1_epi8(3));
}

// Sub-block j's 32 weights of a Q3_K super-block plus 4 (low bits | hmask bit j << 2), 0..7.
template <class Tag>
inline __m256i q3_k_weights(const unsigned char* blk, int j) {
  return _mm256_or_si256(two_bit_weights<Tag>(blk + 32, j), _mm256_slli_epi16(bit_of_bytes<Tag>(blk, j), 2));
}

}  // namespace peregrine::simd_x86
