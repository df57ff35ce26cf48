#pragma once
// Helpers shared by the AVX-512 integer kernels (simd_avx512_int8.cpp for Q8_0/Q4_0,
// simd_avx512_int8_k.cpp for the K-quants). Include only from files built with the AVX-512 flags.
//
// Both files follow simd_avx2_int8.cpp's plan with vpdpbusd (u8 x s8 products summed four at a
// time straight into int32: no int16 stage, no saturation):
// - decode (fewer than kInt8UnpackMinTokens tokens) reads the GGUF rows in place. Every (row,
//   block) needs its eight int32 lanes summed before the block's float multiply-add; that is
//   shuffle work, which Zen 4 runs at half rate on zmm. So Q8_0/Q4_0 keep AVX2's 4-row tile on
//   ymm (8- and 16-row zmm tiles measured slower), while the K-quants take 8-row tiles with two
//   sub-blocks of a row per zmm, where decoding the super-blocks' scales for 8 rows at once pays
//   for the wider shuffles (simd_avx512_int8_k.cpp).
// - batches: interleaved groups of 16 rows x up to 8 tokens. The group is unpacked once into
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
#include "kernels/x86/simd_avx512_inline.h"
#include "kernels/x86/simd_tiles.h"

namespace peregrine::avx512::int8 {

using simd::token_tiles;
using simd::Tokens;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 32 activations of x as bytes.
inline __m256i x_bytes(const Q8Block& x) { return load256(x.q); }

// Prefetches, over a tile's steps, the rows that follow it (kStep bytes of them per step b; see
// simd_x86_shared.h).
template <size_t kStep, _mm_hint kHint = _MM_HINT_T0>
inline void prefetch_ahead(const unsigned char* next, int64_t b) {
  simd_x86::prefetch_ahead<Tag, kStep, kHint>(next, b);
}

// One zmm of four xmm: 128-bit lane l = lane(l).
template <class Lane>
[[gnu::always_inline]] inline __m512i join_lanes(Lane&& lane) {
  __m128i q[4];
#pragma GCC unroll 4
  for (int l = 0; l < 4; ++l) q[l] = lane(l);
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(q[0]), q[1], 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(q[2]), q[3], 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
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
[[gnu::always_inline]] inline void transpose_16x8_epi32(__m512i (&z)[8]) {
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

// The 8 chunks of one 32-weight block of 16 rows into z: v(r) gives row r's 32 weights as
// unsigned bytes (rows at or past n_rows are zero and never read). Always inlined: the fused
// kernels keep z in registers, and a call would send all of them through memory.
template <class RowBytes>
[[gnu::always_inline]] inline void group_block(int n_rows, RowBytes&& v, __m512i (&z)[8]) {
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    const __m256i lo = r < n_rows ? v(r) : _mm256_setzero_si256();
    const __m256i hi = r + 8 < n_rows ? v(r + 8) : _mm256_setzero_si256();
    z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  transpose_16x8_epi32(z);
}

// group_block's chunks stored at out (kAlign-aligned).
template <class RowBytes>
inline void store_group_block(int n_rows, RowBytes&& v, unsigned char* out) {
  __m512i z[8];
  group_block(n_rows, v, z);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) _mm512_store_si512(out + c * kChunkBytes, z[c]);
}

// The fused kernels' walk over a range of rows (n_tokens <= kMaxTokens): group(Tokens<T>{}, r, nr,
// next) for each group of nr (<= 16) rows starting at row r, T = n_tokens; next: the group after
// it when that one is full (for the kernel to prefetch over its blocks), else null.
template <int kMaxTokens, class Group>
inline void fused_row_groups(const unsigned char* rows, size_t row_bytes, int64_t n_rows, int64_t n_tokens,
                             Group&& group) {
  prefetch_first_rows(rows, row_bytes, n_rows < kGroupRows ? n_rows : kGroupRows);
  for (int64_t r = 0; r < n_rows; r += kGroupRows) {
    const int nr = static_cast<int>(n_rows - r < kGroupRows ? n_rows - r : kGroupRows);
    const unsigned char* next = r + 2 * kGroupRows <= n_rows ? rows + (r + kGroupRows) * row_bytes : nullptr;
    auto tile = [&](auto tokens, int64_t) { group(tokens, r, nr, next); };
    simd::rest_tile<kMaxTokens>(n_tokens, 0, tile);
  }
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

// The K-quant kernels (simd_avx512_int8_k.cpp), with matmul_int8's contract for type Q4_K / Q5_K / Q6_K
// (Q6_K: n_tokens <= kMaxTokens; scratch: [scratch_bytes]).
void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
              size_t scratch_bytes);
// Scratch bytes the Q4_K / Q5_K / Q6_K group kernels need for n_blocks / 8 super-blocks of 16 rows.
size_t k_group_bytes(TensorType type, int64_t n_blocks);
// Tokens matmul_k takes per call for Q6_K (which keeps per-token sums of this many in scratch).
constexpr int64_t kMaxTokens = 64;

}  // namespace peregrine::avx512::int8
