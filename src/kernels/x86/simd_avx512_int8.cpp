// AVX-512 VNNI integer dot products of Q8_0 / Q4_0 weight rows with Q8 activation blocks, the
// activations' quantizer, and matmul_int8's dispatch (K-quants: simd_avx512_int8_k.cpp).
// int8_dot.h gives the arithmetic and the reduction order, which these kernels reproduce bit for
// bit; simd_avx512_int8_inline.h describes the two kernels. Built with the AVX-512 flags; the
// rules of simd_avx512.cpp apply (no inline library templates here).
#include <immintrin.h>

#include <cstring>

#include "kernels/int8_dot.h"
#include "kernels/int8_layout.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/simd_avx512.h"
#include "kernels/x86/simd_avx512_inline.h"
#include "kernels/x86/simd_avx512_int8_inline.h"

namespace peregrine::avx512 {
namespace {

using namespace int8;

// Per block of a group: 8 chunks of 64 bytes, then the 16 rows' f32 scales.
constexpr size_t kGroupScales = 8 * kChunkBytes;
constexpr size_t kGroupBlockBytes = kGroupScales + 16 * sizeof(float);

// A packed weight format, for both kernels:
//   kType             its tensor type
//   kBytes            bytes per block of 32 weights in the GGUF row (an f16 scale first)
//   kBias             the unsigned weights row() returns are the weights + kBias
//   row(blk)          the block's 32 weights + kBias as bytes, in element order
//   chunks(blk, ...)  the 16 rows' block in group_block's 8 chunks (the fused groups)

// GGUF Q8_0 block: f16 scale, then 32 signed bytes; w + 128 = w with the sign bit flipped.
struct Q8_0Packed {
  static constexpr TensorType kType = TensorType::Q8_0;
  static constexpr size_t kBytes = 34;
  static constexpr int32_t kBias = 128;
  static __m256i row(const unsigned char* blk) {
    return _mm256_xor_si256(load256(blk + 2), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  // group_block's 8 chunks of block blk of n_rows (<= 16) rows.
  [[gnu::always_inline]] static void chunks(const unsigned char* blk, size_t row_bytes, int n_rows, __m512i (&z)[8]) {
    group_block(
        n_rows, [&](int r) { return row(blk + r * row_bytes); }, z);
  }
};

// GGUF Q4_0 block: f16 scale, then 16 bytes; element j < 16 is the low nibble of byte j, element
// j >= 16 the high nibble of byte j - 16; the weight is the nibble - 8.
struct Q4_0Packed {
  static constexpr TensorType kType = TensorType::Q4_0;
  static constexpr size_t kBytes = 18;
  static constexpr int32_t kBias = 8;
  static __m256i row(const unsigned char* blk) {
    // Both 128-bit halves get the 16 bytes; the high half shifts right by 4 to bring the high
    // nibbles down, and one mask keeps the nibbles.
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(15));
  }
  // group_block's 8 chunks of block blk of n_rows (<= 16) rows, built from the packed bytes:
  // chunk c < 4 is the low nibbles of dword c of the rows' 16 bytes, chunk c + 4 their high
  // nibbles, so only a 16 x 4 dword transpose is needed (4 registers, not group_block's 8) and the
  // nibbles are split after it, 16 rows per instruction. Rows past n_rows are zero.
  [[gnu::always_inline]] static void chunks(const unsigned char* blk, size_t row_bytes, int n_rows, __m512i (&z)[8]) {
    // m[i]: 128-bit lane l = the 16 bytes of row i + 4l.
    __m512i m[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      m[i] = join_lanes([&](int l) {
        const int r = i + 4 * l;
        return r < n_rows ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + r * row_bytes + 2))
                          : _mm_setzero_si128();
      });
    }
    // A 4 x 4 dword transpose in every 128-bit lane: d[k] lane l dword i = m[i] lane l dword k,
    // i.e. d[k] dword r = dword k of row r.
    const __m512i t0 = _mm512_unpacklo_epi32(m[0], m[1]), t1 = _mm512_unpackhi_epi32(m[0], m[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(m[2], m[3]), t3 = _mm512_unpackhi_epi32(m[2], m[3]);
    const __m512i d[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                          _mm512_unpackhi_epi64(t1, t3)};
    const __m512i nibble = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      z[c] = _mm512_and_si512(d[c], nibble);
      z[c + 4] = _mm512_and_si512(_mm512_srli_epi16(d[c], 4), nibble);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Packed tiles (decode): 4 rows x 1-2 tokens on ymm, the AVX2 tile's plan with vpdpbusd. Wider
// decode tiles on zmm measured slower here: reducing each row's eight lanes is shuffle work,
// which Zen 4 runs at half rate on zmm (simd_avx512_int8_inline.h).

constexpr int kPackedRows = 4;

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile (R = 4 or 1). rows: R rows of
// row_bytes; x: T tokens of x_stride blocks each. kPrefetch: prefetch the next R rows.
template <class Packed, int R, int T, bool kPrefetch>
void tile(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
          int64_t y_stride) {
  __m128 acc[T];  // lane r: row r's float chain for token t
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (kPrefetch) prefetch_ahead<R * Packed::kBytes>(rows + R * row_bytes, b);
    const __m128 dw = simd_x86::packed_scales<Tag, Packed::kBytes, R>(rows, row_bytes, b);
    __m256i w[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) w[r] = Packed::row(rows + r * row_bytes + static_cast<size_t>(b) * Packed::kBytes);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const Q8Block& xb = x[t * x_stride + b];
      const __m256i xq = x_bytes(xb);
      __m256i l[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) l[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[r], xq);
      // The exact block sums, then d_w * d_x rounded once and one multiply-add per row.
      const __m128i isum = _mm_sub_epi32(simd_x86::sum_lanes<Tag, R>(l), _mm_set1_epi32(Packed::kBias * xb.sum));
      const __m128 scale = _mm_mul_ps(dw, _mm_broadcast_ss(&xb.d));
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), scale, acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[t]);
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = out[r];
  }
}

// All n_tokens tokens against R packed rows, two tokens per tile; only the first tile
// prefetches: the others find the rows in cache.
template <class Packed, int R, bool kPrefetch>
void packed_rows(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                 int64_t n_blocks, float* y, int64_t y_stride) {
  token_tiles<2>(n_tokens, [&](auto tokens, int64_t t) {
    constexpr int T = decltype(tokens)::value;
    if (t == 0) {
      tile<Packed, R, T, kPrefetch>(rows, row_bytes, x, x_stride, n_blocks, y, y_stride);
    } else {
      tile<Packed, R, T, false>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Interleaved groups.

// Unpacks n_rows (<= 16) packed rows into the group layout at dst (n_blocks * kGroupBlockBytes,
// kAlign-aligned); prefetch_next: prefetch the 16 rows after them as it goes.
template <class Packed>
void unpack_group(const unsigned char* rows, size_t row_bytes, int n_rows, int64_t n_blocks, unsigned char* dst,
                  bool prefetch_next) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (prefetch_next) prefetch_ahead<kGroupRows * Packed::kBytes>(rows + kGroupRows * row_bytes, b);
    const unsigned char* blk = rows + static_cast<size_t>(b) * Packed::kBytes;
    unsigned char* out = dst + static_cast<size_t>(b) * kGroupBlockBytes;
    store_group_block(
        n_rows, [&](int r) { return Packed::row(blk + r * row_bytes); }, out);
    alignas(32) uint16_t h[16] = {};
    for (int r = 0; r < n_rows; ++r) std::memcpy(&h[r], blk + r * row_bytes, 2);
    _mm512_store_ps(out + kGroupScales, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h))));
  }
}

// y[t * y_stride + r] = dot(row r, token t) for the n_rows rows of an unpacked group and T tokens.
template <int32_t kBias, int T>
void group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
                int64_t y_stride, int n_rows) {
  __m512 acc[T];  // lane r: row r's float chain for token t
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const unsigned char* blk = group + static_cast<size_t>(b) * kGroupBlockBytes;
    __m512i sum[T];  // starts at -bias * sum(x), so it ends at the block's exact sum
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) sum[t] = _mm512_set1_epi32(-kBias * x[t * x_stride + b].sum);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i w = _mm512_load_si512(blk + c * kChunkBytes);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) sum[t] = dpbusd_chunk(sum[t], w, x[t * x_stride + b], c);
    }
    const __m512 dw = _mm512_load_ps(blk + kGroupScales);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x[t * x_stride + b].d));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), scale, acc[t]);
    }
  }
  store_group<T>(acc, n_rows, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// Fused groups (few tokens): the group layout built per block in registers, not in scratch.

// Lane r = the f16 scale starting block blk of row r, as a float (0 for r >= n_rows): 2-byte
// loads packed four to a 64-bit register (a gather or a store-and-reload costs more on Zen 4).
inline __m512 row_scales16(const unsigned char* blk, size_t row_bytes, int n_rows) {
  __m128i q[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    uint64_t v = 0;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      uint16_t h = 0;
      if (4 * i + k < n_rows) std::memcpy(&h, blk + (4 * i + k) * row_bytes, 2);
      v |= static_cast<uint64_t>(h) << (16 * k);
    }
    q[i] = _mm_cvtsi64_si128(static_cast<int64_t>(v));
  }
  const __m256i h16 = _mm256_setr_m128i(_mm_unpacklo_epi64(q[0], q[1]), _mm_unpacklo_epi64(q[2], q[3]));
  return _mm512_cvtph_ps(h16);
}

// Every token's int sums and float chains advanced by one block of a 16-row group: w the block's
// 8 chunks (group_block's layout), dw the rows' scales, x the tokens' blocks (token t at
// x[t * x_stride + b]). Always inlined: w stays in registers.
template <int32_t kBias, int T>
[[gnu::always_inline]] inline void group_tokens(const __m512i (&w)[8], __m512 dw, const Q8Block* x, int64_t x_stride,
                                                int64_t b, __m512 (&acc)[T]) {
  // The tokens' bias terms through memory: vpbroadcastd from memory is a load, from a general
  // register an extra vector uop per token and block.
  alignas(64) int32_t neg_bias_sum[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) neg_bias_sum[t] = -kBias * x[t * x_stride + b].sum;
  if constexpr (T <= 2) {
    // Few tokens: each token's 8 vpdpbusd as two chains of 4 (exact integer sums, joined once),
    // so one block's latency does not hold up the next.
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const Q8Block& xb = x[t * x_stride + b];
      __m512i lo = _mm512_set1_epi32(neg_bias_sum[t]), hi = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        lo = dpbusd_chunk(lo, w[c], xb, c);
        hi = dpbusd_chunk(hi, w[c + 4], xb, c + 4);
      }
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), scale, acc[t]);
    }
    return;
  }
  // Tokens in groups of kChains, their chains interleaved: each token's 8 vpdpbusd depend on
  // one another.
  constexpr int kChains = 4;
#pragma GCC unroll 16
  for (int t = 0; t < T; t += kChains) {
    __m512i sum[kChains];
#pragma GCC unroll 4
    for (int i = 0; i < kChains; ++i) sum[i] = _mm512_set1_epi32(neg_bias_sum[t + i < T ? t + i : t]);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
#pragma GCC unroll 4
      for (int i = 0; i < kChains; ++i) {
        if (t + i < T) sum[i] = dpbusd_chunk(sum[i], w[c], x[(t + i) * x_stride + b], c);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < kChains; ++i) {
      if (t + i >= T) continue;
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x[(t + i) * x_stride + b].d));
      acc[t + i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), scale, acc[t + i]);
    }
  }
}

// y[t * y_stride + r] = dot(row r, token t) for n_rows (<= 16) packed rows and T tokens: per
// block the 16 rows' weights are interleaved in 8 registers (group_block) and every token's int
// sums and float chains advance from them. next: the rows after these, prefetched over the blocks
// (null: none).
template <class Packed, int T>
void fused_group(const unsigned char* rows, size_t row_bytes, int n_rows, const Q8Block* x, int64_t x_stride,
                 int64_t n_blocks, float* y, int64_t y_stride, const unsigned char* next) {
  __m512 acc[T];  // lane r: row r's float chain for token t
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (next) prefetch_ahead<kGroupRows * Packed::kBytes>(next, b);
    const unsigned char* blk = rows + static_cast<size_t>(b) * Packed::kBytes;
    __m512i w[8];
    Packed::chunks(blk, row_bytes, n_rows, w);
    group_tokens<Packed::kBias, T>(w, row_scales16(blk, row_bytes, n_rows), x, x_stride, b, acc);
  }
  store_group<T>(acc, n_rows, y, y_stride);
}

// ---------------------------------------------------------------------------------------------
// Interleaved layouts (int8_layout.h): each block of a group is already the fused group's chunks,
// packed, so a few loads replace a packed format's 16 row loads and transpose, one load replaces
// the 16 scale loads, and each thread reads one sequential stream. A layout:
//   kBias, kBlockBytes  as Packed's kBias, and one interleaved block's bytes
//   block(blk, w)       the block's 8 chunks into w (weights + kBias); returns its 16 scales

// Q4_0_X16: chunk c < 4 in the low nibbles of the block's chunk c, chunk c + 4 in its high ones.
struct Q4_0X16 {
  static constexpr int32_t kBias = Q4_0Packed::kBias;
  static constexpr size_t kBlockBytes = kGroupRows * Q4_0Packed::kBytes;
  [[gnu::always_inline]] static __m512 block(const unsigned char* blk, __m512i (&w)[8]) {
    const __m512i nibble = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i d = _mm512_loadu_si512(blk + c * kChunkBytes);
      w[c] = _mm512_and_si512(d, nibble);
      w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(d, 4), nibble);
    }
    return _mm512_cvtph_ps(load256(blk + 4 * kChunkBytes));
  }
};

// Q8_0_X16: 8 chunks of signed bytes, made unsigned by flipping the sign bit (w + 128).
struct Q8_0X16 {
  static constexpr int32_t kBias = Q8_0Packed::kBias;
  static constexpr size_t kBlockBytes = kGroupRows * Q8_0Packed::kBytes;
  [[gnu::always_inline]] static __m512 block(const unsigned char* blk, __m512i (&w)[8]) {
    const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) w[c] = _mm512_xor_si512(_mm512_loadu_si512(blk + c * kChunkBytes), sign);
    return _mm512_cvtph_ps(load256(blk + 8 * kChunkBytes));
  }
};

// y[t * y_stride + r] = dot(row r, token t) for the n_rows (<= 16) rows of an interleaved group
// and T tokens. next: the group after it, prefetched over the blocks (null: none): the hardware
// prefetchers alone left many tokens' blocks waiting on memory.
template <class Layout, int T>
void x16_group(const unsigned char* group, int n_rows, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
               int64_t y_stride, const unsigned char* next) {
  __m512 acc[T];  // lane r: row r's float chain for token t
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (next) prefetch_ahead<Layout::kBlockBytes>(next, b);
    __m512i w[8];
    const __m512 dw = Layout::block(group + static_cast<size_t>(b) * Layout::kBlockBytes, w);
    group_tokens<Layout::kBias, T>(w, dw, x, x_stride, b, acc);
  }
  store_group<T>(acc, n_rows, y, y_stride);
}

// An interleaved group's blocks in group_tile's layout at dst (n_blocks * kGroupBlockBytes,
// kAlign-aligned): for batches, whose token tiles then reread plain chunks.
// next: as x16_group's.
template <class Layout>
void x16_unpack(const unsigned char* group, int64_t n_blocks, unsigned char* dst, const unsigned char* next) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (next) prefetch_ahead<Layout::kBlockBytes>(next, b);
    __m512i w[8];
    const __m512 dw = Layout::block(group + static_cast<size_t>(b) * Layout::kBlockBytes, w);
    unsigned char* out = dst + static_cast<size_t>(b) * kGroupBlockBytes;
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm512_store_si512(out + c * kChunkBytes, w[c]);
    _mm512_store_ps(out + kGroupScales, dw);
  }
}

// Tokens up to which an interleaved group meets them straight from the stream (x16_group); more
// go through group_tile's unpacked scratch. Measured on the 2-vCPU Zen host, weights streaming
// from memory (32000 x 2048, one thread): x16_group is 1.2-1.5x the file layout's kernels at 1-2
// tokens and about even at 3-4, but at 8 and 16 tokens it fell to 0.3-0.6x (cache-resident it is
// 1.2-1.3x faster there: the stream stalls, and prefetching one or two groups ahead into L1 or
// L2, or blocks ahead, did not change it); unpacking first measured 0.6-0.9x there.
constexpr int64_t kX16FusedMaxTokens = 4;

// matmul_int8 for an interleaved layout: rows starts at a group (row_bytes: the source type's
// row bytes).
template <class Layout>
void matmul_x16(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
                size_t scratch_bytes) {
  const size_t group_bytes = kGroupRows * row_bytes;
  unsigned char* unpacked =
      n_tokens > kX16FusedMaxTokens
          ? aligned_scratch(scratch, scratch_bytes, static_cast<size_t>(n_blocks) * kGroupBlockBytes)
          : nullptr;
  prefetch_first_rows(rows, group_bytes, 1);  // the first group: no earlier one prefetched it
  for (int64_t r = 0; r < n_rows; r += kGroupRows) {
    const int nr = static_cast<int>(n_rows - r < kGroupRows ? n_rows - r : kGroupRows);
    const unsigned char* group = rows + static_cast<size_t>(r / kGroupRows) * group_bytes;
    const unsigned char* next = r + 2 * kGroupRows <= n_rows ? group + group_bytes : nullptr;
    if (unpacked) {
      x16_unpack<Layout>(group, n_blocks, unpacked, next);
      token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
        group_tile<Layout::kBias, decltype(tokens)::value>(unpacked, x + t * x_stride, x_stride, n_blocks,
                                                           y + t * y_stride + r, y_stride, nr);
      });
      continue;
    }
    token_tiles<kX16FusedMaxTokens>(n_tokens, [&](auto tokens, int64_t t) {
      x16_group<Layout, decltype(tokens)::value>(group, nr, x + t * x_stride, x_stride, n_blocks, y + t * y_stride + r,
                                                 y_stride, t == 0 ? next : nullptr);
    });
  }
}

// ---------------------------------------------------------------------------------------------

template <class Packed>
void matmul_blocks(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::byte* scratch,
                   size_t scratch_bytes) {
  if (n_tokens >= int8_few_min_tokens(Packed::kType) && n_tokens <= kInt8FewMaxTokens) {
    return fused_row_groups<kInt8FewMaxTokens>(
        rows, row_bytes, n_rows, n_tokens, [&](auto tokens, int64_t r, int nr, const unsigned char* next) {
          fused_group<Packed, decltype(tokens)::value>(rows + r * row_bytes, row_bytes, nr, x, x_stride, n_blocks,
                                                       y + r, y_stride, next);
        });
  }
  unsigned char* group = n_tokens >= kInt8UnpackMinTokens
                             ? aligned_scratch(scratch, scratch_bytes, static_cast<size_t>(n_blocks) * kGroupBlockBytes)
                             : nullptr;
  if (group) {
    // Every row goes through a group, the last one possibly partial (its missing rows are zero
    // and their outputs never stored): even one row costs less there than in a packed tile.
    for (int64_t r = 0; r < n_rows; r += kGroupRows) {
      const int nr = static_cast<int>(n_rows - r < kGroupRows ? n_rows - r : kGroupRows);
      unpack_group<Packed>(rows + r * row_bytes, row_bytes, nr, n_blocks, group, r + 2 * kGroupRows <= n_rows);
      token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
        group_tile<Packed::kBias, decltype(tokens)::value>(group, x + t * x_stride, x_stride, n_blocks,
                                                           y + t * y_stride + r, y_stride, nr);
      });
    }
    return;
  }
  int64_t r = 0;
  prefetch_first_rows(rows, row_bytes, n_rows < kPackedRows ? n_rows : kPackedRows);
  for (; r + kPackedRows <= n_rows; r += kPackedRows) {
    packed_rows<Packed, kPackedRows, true>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r,
                                           y_stride);
  }
  for (; r < n_rows; ++r) {
    packed_rows<Packed, 1, false>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
}

}  // namespace

namespace {
// The types this path has no kernels of its own for (has_own_int8) run AVX2's (simd_avx2.h).
bool has_own_int8(TensorType type) {
  return type == TensorType::Q8_0 || type == TensorType::Q4_0 || type == TensorType::Q4_K || type == TensorType::Q5_K ||
         type == TensorType::Q6_K || is_interleaved_type(type);
}
}  // namespace

size_t int8_unpack_scratch_bytes(TensorType type, int64_t n_blocks) {
  if (!has_own_int8(type)) return avx2::int8_unpack_scratch_bytes(type, n_blocks);
  const size_t bytes = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K
                           ? int8::k_group_bytes(type, n_blocks)
                           : static_cast<size_t>(n_blocks) * kGroupBlockBytes;
  return bytes + kAlign;  // room to align the start
}

void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    // max is exact, so any order of the maxima gives the scalar reference's absmax.
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    out[b].d = d;
    const __m512 idv = _mm512_set1_ps(id);
    // x * id rounded to nearest even, as nearbyint does in the default rounding mode.
    const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    out[b].sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    // Saturating narrowing, as AVX2's packs (values are within [-127, 127] for finite input).
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16), _mm512_cvtsepi32_epi8(q1));
  }
}

void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                 std::span<std::byte> scratch) {
  if (!has_own_int8(type)) {
    return avx2::matmul_int8(type, rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
  }
  const auto* p = static_cast<const unsigned char*>(rows);
  std::byte* s = scratch.data();
  const size_t s_bytes = scratch.size();
  // Q6_K's groups keep per-token sums for at most kMaxTokens tokens; the others take every token
  // in one pass, each group of rows unpacked once.
  const int64_t step = type == TensorType::Q6_K ? kMaxTokens : n_tokens;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += step) {
    const int64_t nt = n_tokens - t0 < step ? n_tokens - t0 : step;
    const Q8Block* xt = x + t0 * x_stride;
    float* yt = y + t0 * y_stride;
    switch (type) {
      case TensorType::Q8_0:
        matmul_blocks<Q8_0Packed>(p, row_bytes, n_rows, xt, x_stride, nt, n_blocks, yt, y_stride, s, s_bytes);
        break;
      case TensorType::Q4_0:
        matmul_blocks<Q4_0Packed>(p, row_bytes, n_rows, xt, x_stride, nt, n_blocks, yt, y_stride, s, s_bytes);
        break;
      case TensorType::Q4_0_X16:
        matmul_x16<Q4_0X16>(p, row_bytes, n_rows, xt, x_stride, nt, n_blocks, yt, y_stride, s, s_bytes);
        break;
      case TensorType::Q8_0_X16:
        matmul_x16<Q8_0X16>(p, row_bytes, n_rows, xt, x_stride, nt, n_blocks, yt, y_stride, s, s_bytes);
        break;
      case TensorType::Q4_K:
      case TensorType::Q5_K:
      case TensorType::Q6_K:
        int8::matmul_k(type, p, row_bytes, n_rows, xt, x_stride, nt, n_blocks, yt, y_stride, s, s_bytes);
        break;
      default:
        return;
    }
  }
}

}  // namespace peregrine::avx512
