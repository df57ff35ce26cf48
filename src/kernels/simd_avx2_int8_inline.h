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
#include "kernels/simd_avx2_inline.h"
#include "kernels/simd_tiles.h"

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

// The 4 activations x.q[4c..4c+3] in every dword.
inline __m256i broadcast_chunk(const Q8Block& x, int c) {
  int32_t v;
  std::memcpy(&v, x.q + 4 * c, 4);
  return _mm256_set1_epi32(v);
}

// The K-quant kernels (simd_avx2_int8_k.cpp), with matmul_int8's contract for type Q4_K / Q6_K.
void matmul_k(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
              int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
              std::span<std::byte> scratch);
// Scratch bytes the Q4_K / Q6_K group kernels unpack n_blocks / 8 super-blocks of 8 rows into.
size_t k_group_bytes(TensorType type, int64_t n_blocks);

}  // namespace peregrine::avx2::int8
