#pragma once
// Helpers shared by the AVX-512 integer kernels (simd_avx512_int8.cpp for Q8_0/Q4_0,
// simd_avx512_int8_k.cpp for the K-quants). Include only from files built with the AVX-512 flags.
//
// Both files have the same two kernels (the plan of simd_avx2_int8.cpp, with vpdpbusd: u8 x s8
// products summed four at a time straight into int32, so no int16 stage and no saturation):
// - packed tiles, 4 rows x 1-2 tokens, reading the GGUF rows in place (decode);
// - interleaved groups of 16 rows x up to 8 tokens for batches: the group is unpacked once into
//   scratch, chunk c of a 32-weight block holding weights 4c..4c+3 of each of the 16 rows, so one
//   zmm vpdpbusd with 4 broadcast activations advances all 16 rows, and the lanes of the float
//   accumulator are the 16 rows' chains.
// vpdpbusd wants unsigned weights; every format's weights are made unsigned by a bias (Q8_0:
// w + 128, Q4_0: the nibble w + 8, Q6_K: q = w + 32) whose product with the activations,
// bias * sum(x), is subtracted as an exact integer.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "format/tensor_type.h"
#include "kernels/int8_dot.h"
#include "kernels/simd_tiles.h"

namespace peregrine::avx512::int8 {

using simd::token_tiles;
using simd::Tokens;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 32 activations of x as bytes.
inline __m256i x_bytes(const Q8Block& x) { return load256(x.q); }

// ---------------------------------------------------------------------------------------------
// Decode tiles: 8 rows read in place, two 32-weight blocks (or sub-blocks) of each row per zmm.

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
inline __m512i load_lanes16(At&& at) {
  __m128i q[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    uint64_t v[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      uint32_t a = 0, b = 0;
      if (const unsigned char* p = at(4 * i + 2 * h)) std::memcpy(&a, p, 4);
      if (const unsigned char* p = at(4 * i + 2 * h + 1)) std::memcpy(&b, p, 4);
      v[h] = a | static_cast<uint64_t>(b) << 32;
    }
    q[i] = _mm_insert_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(v[0])), static_cast<int64_t>(v[1]), 1);
  }
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(q[0]), q[1], 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(q[2]), q[3], 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Lane i = the 4 bytes at base + (i % 8) * row_bytes (both halves: the tile's 8 rows), 0 for
// rows at or past n_rows.
inline __m512i load_row_dwords(const unsigned char* base, size_t row_bytes, int n_rows) {
  return load_lanes16([&](int i) { return i % 8 < n_rows ? base + (i % 8) * row_bytes : nullptr; });
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

// Prefetches, over a tile's steps, the rows that follow it (kStep bytes of them per step b): the
// rows are short, so the hardware prefetcher sees many brief streams per tile and never gets
// ahead (simd_avx2_int8.cpp measured the same).
template <size_t kStep>
inline void prefetch_ahead(const unsigned char* next, int64_t b) {
  const char* p = reinterpret_cast<const char*>(next + static_cast<size_t>(b) * kStep);
#pragma GCC unroll 16
  for (size_t off = 0; off < kStep; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// The first n_rows rows of a range: the first tile, which no earlier tile prefetched.
inline void prefetch_first_rows(const unsigned char* rows, size_t row_bytes, int64_t n_rows) {
  const char* p = reinterpret_cast<const char*>(rows);
  for (size_t off = 0; off < static_cast<size_t>(n_rows) * row_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// ---------------------------------------------------------------------------------------------
// Interleaved groups.

constexpr int kGroupRows = 16;
constexpr int kGroupTokens = 8;
constexpr size_t kChunkBytes = 64;  // 4 weights of each of the 16 rows
constexpr size_t kAlign = 64;

// Scratch of at least `bytes` rounded up to kAlign, or null when there is not enough of it.
// scratch: [scratch_bytes].
inline unsigned char* aligned_scratch(std::byte* scratch, size_t scratch_bytes, size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(scratch);
  const size_t skip = (kAlign - start % kAlign) % kAlign;
  if (scratch == nullptr || scratch_bytes < skip + bytes) return nullptr;
  return reinterpret_cast<unsigned char*>(start + skip);
}

// In place: on entry z[r] holds row r's 8 dwords in its low half and row r + 8's in its high
// half (dword c = the row's weights 4c..4c+3); on exit z[c] is chunk c (dword k = row k's).
inline void transpose_16x8_epi32(__m512i (&z)[8]) {
  __m512i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[c] (c < 4): 128-bit lanes (chunk c rows 0-3, chunk c+4 rows 0-3, chunk c rows 8-11, chunk
  // c+4 rows 8-11); u[c + 4] the same for rows 4-7 and 12-15.
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    z[c] = _mm512_permutex2var_epi64(u[c], lo, u[c + 4]);
    z[c + 4] = _mm512_permutex2var_epi64(u[c], hi, u[c + 4]);
  }
}

// Stores the 8 chunks of one 32-weight block of 16 rows at out (kAlign-aligned): v(r) gives row
// r's 32 weights as unsigned bytes (rows at or past n_rows are zero and never read).
template <class RowBytes>
inline void store_group_block(int n_rows, RowBytes&& v, unsigned char* out) {
  __m512i z[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    const __m256i lo = r < n_rows ? v(r) : _mm256_setzero_si256();
    const __m256i hi = r + 8 < n_rows ? v(r + 8) : _mm256_setzero_si256();
    z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  transpose_16x8_epi32(z);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) _mm512_store_si512(out + c * kChunkBytes, z[c]);
}

// The 4 activations x.q[4c..4c+3] in every dword.
inline __m512i broadcast_chunk(const Q8Block& x, int c) {
  int32_t v;
  std::memcpy(&v, x.q + 4 * c, 4);
  return _mm512_set1_epi32(v);
}

// acc + vpdpbusd(w, the 4 activations x.q[4c..4c+3] in every dword), with the activations as the
// instruction's broadcast memory operand: one instruction where the intrinsics give two (GCC 12
// does not fold the broadcast into vpdpbusd).
inline __m512i dpbusd_chunk(__m512i acc, __m512i w, const Q8Block& x, int c) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x.q + 4 * c)));
  return acc;
}

// Writes the first n_rows lanes of acc[t] to y[t * y_stride + lane].
template <int T>
inline void store_group(const __m512 (&acc)[T], int n_rows, float* y, int64_t y_stride) {
  const __mmask16 mask = static_cast<__mmask16>((1u << n_rows) - 1u);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

// The K-quant kernels (simd_avx512_int8_k.cpp), with matmul_int8's contract for type Q4_K / Q6_K
// (n_tokens <= kMaxTokens; scratch: [scratch_bytes]).
void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
              size_t scratch_bytes);
// Scratch bytes the Q4_K / Q6_K group kernels need for n_blocks / 8 super-blocks of 16 rows.
size_t k_group_bytes(TensorType type, int64_t n_blocks);
// Tokens matmul_k takes per call (Q6_K keeps per-token sums of this many in scratch).
constexpr int64_t kMaxTokens = 64;

}  // namespace peregrine::avx512::int8
