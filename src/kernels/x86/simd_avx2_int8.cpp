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
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/simd_avx2_inline.h"
#include "kernels/x86/simd_avx2_int8_inline.h"

namespace peregrine::avx2 {
namespace {

using namespace int8;

// ---------------------------------------------------------------------------------------------
// Packed tiles.

// The packed formats, policies of sub_block_tile (simd_avx2_int8_inline.h).

// GGUF Q8_0 block: f16 scale, then 32 signed bytes: signed_lanes' sign trick, with the signed
// bytes read again per token (an L1 hit) to save a register.
struct Q8_0Packed : ScaledBlocks32<34> {
  struct Row {
    __m256i abs_w;
    const void* w;
  };
  struct Token {};
  static Token token(const Q8Block&) { return {}; }
  static Row row(const unsigned char* blk, int) {
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
// straight into vpmaddubsw and the -8 is paid per token instead of per product (offset_lanes:
// |u x pair| <= 2 * 15 * 127 and |8 x pair| <= 2032, so int16 holds both and their difference).
struct Q4_0Packed : ScaledBlocks32<18> {
  using Row = __m256i;    // the 32 unsigned nibbles as bytes, in element order
  using Token = __m256i;  // 8 * (x_2k + x_2k+1) as 16 int16
  static Token token(const Q8Block& x) { return bias_pairs(8, x); }
  static Row row(const unsigned char* blk, int) { return simd_x86::nibbles32<Tag>(blk + 2); }
  static __m256i lanes(Row u, const Q8Block& x, Token eight_x) {
    return offset_lanes(u, x, eight_x, _mm256_set1_epi16(1));
  }
};

// ---------------------------------------------------------------------------------------------
// Interleaved groups.

// Unpacks block b of 8 packed rows at `rows` into the group layout at out (kGroupBlockBytes,
// 32-byte aligned). Weights as the group tile wants them: Q4_0 unsigned nibbles (the -8 is
// applied to the sum), Q8_0 signed bytes.
template <class Packed>
[[gnu::always_inline]] inline void unpack_block(const unsigned char* rows, size_t row_bytes, int64_t b,
                                                unsigned char* out) {
  __m256i v[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    const unsigned char* blk = rows + r * row_bytes + static_cast<size_t>(b) * Packed::kBytes;
    if constexpr (Packed::kBytes == Q4_0Packed::kBytes) {
      v[r] = Q4_0Packed::row(blk, 0);
    } else {
      v[r] = load(blk + 2);
    }
  }
  transpose_8x8_epi32(v);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) _mm256_store_si256(reinterpret_cast<__m256i*>(out + c * kChunkBytes), v[c]);
  const __m128 lo = simd_x86::packed_scales<Tag, Packed::kBytes, 4>(rows, row_bytes, b);
  const __m128 hi = simd_x86::packed_scales<Tag, Packed::kBytes, 4>(rows + 4 * row_bytes, row_bytes, b);
  _mm256_store_ps(reinterpret_cast<float*>(out + kGroupScales), _mm256_set_m128(hi, lo));
}

// Unpacks 8 packed rows at `rows` into the group layout at dst (n_blocks * kGroupBlockBytes,
// 32-byte aligned), prefetching the 8 rows after them as it goes.
template <class Packed>
void unpack_group(const unsigned char* rows, size_t row_bytes, int64_t n_blocks, unsigned char* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_ahead<kGroupRows * Packed::kBytes>(rows + kGroupRows * row_bytes, b);
    unpack_block<Packed>(rows, row_bytes, b, dst + static_cast<size_t>(b) * kGroupBlockBytes);
  }
}

// One unpacked block (at blk) of block index b against T tokens: acc[t] (lane r: row r's float
// chain for token t) advances by the block's multiply-add.
template <bool kQ4_0, int T>
[[gnu::always_inline]] inline void group_block_tokens(const unsigned char* blk, const Q8Block* x, int64_t x_stride,
                                                      int64_t b, __m256* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
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

// y[t * y_stride + r] = dot(row r, token t) for the 8 rows of an unpacked group and T tokens.
template <bool kQ4_0, int T>
void group_tile(const unsigned char* group, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
                int64_t y_stride) {
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    group_block_tokens<kQ4_0, T>(group + static_cast<size_t>(b) * kGroupBlockBytes, x, x_stride, b, acc);
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

// Blocks of a group unpacked per run of the fused kernel: 8 x 288 bytes stay in L1, and each
// token tile keeps its chains in registers over the run.
constexpr int64_t kFusedRunBlocks = 8;

// Blocks [b0, b0 + n) of a group, unpacked at run (block b0 first), against T tokens: acc[t]
// (in memory between runs) advances by their multiply-adds.
template <bool kQ4_0, int T>
void group_run(const unsigned char* run, const Q8Block* x, int64_t x_stride, int64_t b0, int64_t n, __m256* acc) {
  __m256 a[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) a[t] = acc[t];
  for (int64_t b = 0; b < n; ++b) {
    group_block_tokens<kQ4_0, T>(run + static_cast<size_t>(b) * kGroupBlockBytes, x, x_stride, b0 + b, a);
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = a[t];
}

// Fused groups (few tokens, n_tokens <= kInt8FewMaxTokens): the 8 rows are unpacked a run of
// kFusedRunBlocks blocks at a time into a buffer in L1 and dotted with every token there, so the
// rows stream past once (prefetching the 8 after them) and no group goes through scratch.
template <class Packed>
void fused_group(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                 int64_t n_blocks, float* y, int64_t y_stride) {
  constexpr bool kQ4_0 = Packed::kBytes == Q4_0Packed::kBytes;
  __m256 acc[kInt8FewMaxTokens];
  for (int64_t t = 0; t < n_tokens; ++t) acc[t] = _mm256_setzero_ps();
  alignas(32) unsigned char run[kFusedRunBlocks * kGroupBlockBytes];
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kFusedRunBlocks) {
    const int64_t n = n_blocks - b0 < kFusedRunBlocks ? n_blocks - b0 : kFusedRunBlocks;
    for (int64_t b = 0; b < n; ++b) {
      prefetch_ahead<kGroupRows * Packed::kBytes>(rows + kGroupRows * row_bytes, b0 + b);
      unpack_block<Packed>(rows, row_bytes, b0 + b, run + static_cast<size_t>(b) * kGroupBlockBytes);
    }
    token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
      group_run<kQ4_0, decltype(tokens)::value>(run, x + t * x_stride, x_stride, b0, n, acc + t);
    });
  }
  for (int64_t t = 0; t < n_tokens; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

// ---------------------------------------------------------------------------------------------

template <class Packed>
void matmul_blocks(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::span<std::byte> scratch) {
  constexpr bool kQ4_0 = Packed::kBytes == Q4_0Packed::kBytes;
  int64_t r = 0;
  if (n_tokens >= int8_few_min_tokens(kQ4_0 ? TensorType::Q4_0 : TensorType::Q8_0) && n_tokens <= kInt8FewMaxTokens) {
    for (; r + kGroupRows <= n_rows; r += kGroupRows) {
      fused_group<Packed>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
    }
  } else if (n_tokens >= kInt8UnpackMinTokens &&
             scratch.size() >= int8_unpack_scratch_bytes(kQ4_0 ? TensorType::Q4_0 : TensorType::Q8_0, n_blocks)) {
    auto* group = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 31) / 32 * 32);
    for (; r + kGroupRows <= n_rows; r += kGroupRows) {
      unpack_group<Packed>(rows + r * row_bytes, row_bytes, n_blocks, group);
      group_tokens<kQ4_0>(group, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
    }
  }
  sub_block_rows<Packed>(rows + r * row_bytes, row_bytes, n_rows - r, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
}

}  // namespace

size_t int8_unpack_scratch_bytes(TensorType type, int64_t n_blocks) {
  size_t bytes = 0;  // the packed-tile-only types (matmul_tiles) use none
  if (type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K) {
    bytes = int8::k_group_bytes(type, n_blocks);
  } else if (type == TensorType::Q8_0 || type == TensorType::Q4_0) {
    bytes = static_cast<size_t>(n_blocks) * kGroupBlockBytes;
  }
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
  switch (type) {
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      return int8::matmul_k(type, p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
    case TensorType::Q8_0:
      return matmul_blocks<Q8_0Packed>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
    case TensorType::Q4_0:
      return matmul_blocks<Q4_0Packed>(p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride, scratch);
    default:
      return int8::matmul_tiles(type, p, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride);
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
