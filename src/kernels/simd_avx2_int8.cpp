// AVX2 integer dot products of Q8_0 / Q4_0 weight rows with Q8 activation blocks (int8_dot.h
// gives the arithmetic and the reduction order, which these kernels reproduce bit for bit);
// matmul_int8 here also hands Q4_K / Q6_K rows to their kernels in simd_avx2_int8_k.cpp.
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

#include "kernels/int8_dot.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_inline.h"
#include "kernels/simd_avx2_int8_inline.h"

namespace peregrine::avx2 {
namespace {

using namespace int8;

// ---------------------------------------------------------------------------------------------
// Packed tiles.

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
  return simd_x86::packed_scales<Tag, kBytes, R>(rows, row_bytes, b);
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
  store_rows<R, T>(acc, y, y_stride);
}

// All n_tokens tokens against R packed rows, two tokens per tile (the register budget); only
// the first tile prefetches: the others find the rows in cache.
template <class Blocks, int R, bool kPrefetch>
void packed_rows(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                 int64_t n_blocks, float* y, int64_t y_stride) {
  token_tiles<2>(n_tokens, [&](auto tokens, int64_t t) {
    constexpr int T = decltype(tokens)::value;
    if (t == 0) {
      tile<Blocks, R, T, kPrefetch>(rows, row_bytes, x, x_stride, n_blocks, y, y_stride);
    } else {
      tile<Blocks, R, T, false>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Interleaved groups.

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
  token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
    group_tile<kQ4_0, decltype(tokens)::value>(group, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
  });
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
  if (r + kTileRows <= n_rows) prefetch_first_tile(rows + r * row_bytes, row_bytes);
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
  const size_t bytes = type == TensorType::Q4_K || type == TensorType::Q6_K
                           ? int8::k_group_bytes(type, n_blocks)
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
  if (type == TensorType::Q4_K || type == TensorType::Q6_K) {
    return int8::matmul_k(type, p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
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
