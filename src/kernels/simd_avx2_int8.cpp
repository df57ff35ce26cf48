// AVX2 integer dot products of Q8_0 / Q4_0 weight rows with Q8 activation blocks (int8_dot.h
// gives the arithmetic and the reduction order, which these kernels reproduce bit for bit).
// Built with -mavx2 -mfma -mf16c; the same rules as simd_avx2.cpp apply (no inline library
// templates here).
//
// The work is cut into tiles of 4 rows x T tokens whose 4 x T accumulators stay in registers.
// Two ways to feed a tile:
// - straight from the packed GGUF rows (batch-1 decode, small batches): every weight byte is
//   read once, and the tile prefetches the next 4 rows while it works;
// - from an unpacked copy (batches of kUnpackMinTokens and more): the 4 rows are first expanded
//   once into per-thread scratch (Q4_0 nibbles to bytes, Q8_0 |w| beside w, f16 scales to f32),
//   so the per-row work is paid once per 4 rows and token block, not once per token tile.
// Both feed the same per-product arithmetic, so they give the same bits.
#include <immintrin.h>

#include <cstring>

#include "kernels/int8_dot.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_inline.h"

namespace peregrine::avx2 {
namespace {

constexpr int kTileRows = 4;

// A weight format is a policy the tile calls per block b:
//   scales<R>(rows, row_bytes, b)  the R rows' f32 scales d_w as four floats (lanes >= R are 0)
//   token(x_t)                     once per token: work shared by every row of the tile
//   row(rows + r * row_bytes + b * kBytes)
//                                  once per row: the row's block, ready to multiply
//   lanes(row, x_t, token)         once per (row, token): the eight exact int32 lane sums
// Packed policies read GGUF rows; Unpacked ones read the tile copy that unpack() writes.

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Scales of block b of R packed rows whose blocks start with an f16 scale.
template <size_t kBytes, int R>
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

// Q8_0 arithmetic: vpmaddubsw needs one unsigned operand, so |w| times x with w's sign moved
// onto x. Pair sums stay below 2 * 127 * 127, inside int16.
struct Q8_0Math {
  struct Row {
    __m256i abs_w;
    const void* w;  // the signed bytes, read again per token (an L1 hit) to save a register
  };
  struct Token {};
  static Token token(const Q8Block&) { return {}; }
  static __m256i lanes(const Row& r, const Q8Block& x, Token) {
    const __m256i pairs = _mm256_maddubs_epi16(r.abs_w, _mm256_sign_epi8(load(x.q), load(r.w)));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
};

// Q4_0 arithmetic: the unsigned nibbles u go straight into vpmaddubsw and the -8 is paid per
// token instead of per product: sum (u - 8) x = sum u x - 8 sum x, with 8 (x_2k + x_2k+1)
// computed once per token as int16 pairs. |u x pair| <= 2 * 15 * 127 and |8 x pair| <= 2032,
// so int16 holds both and their difference, and the lane sums are the reference's integers.
struct Q4_0Math {
  using Row = __m256i;    // the 32 unsigned nibbles as bytes, in element order
  using Token = __m256i;  // 8 * (x_2k + x_2k+1) as 16 int16
  static Token token(const Q8Block& x) { return _mm256_maddubs_epi16(_mm256_set1_epi8(8), load(x.q)); }
  static __m256i lanes(Row u, const Q8Block& x, Token eight_x) {
    const __m256i pairs = _mm256_maddubs_epi16(u, load(x.q));
    return _mm256_madd_epi16(_mm256_sub_epi16(pairs, eight_x), _mm256_set1_epi16(1));
  }
};

// GGUF Q8_0 block: f16 scale, then 32 signed bytes.
struct Q8_0Packed : Q8_0Math {
  static constexpr size_t kBytes = 34;
  template <int R>
  static __m128 scales(const unsigned char* rows, size_t row_bytes, int64_t b) {
    return packed_scales<kBytes, R>(rows, row_bytes, b);
  }
  static Row row(const unsigned char* blk) {
    const __m256i w = load(blk + 2);
    return {_mm256_sign_epi8(w, w), blk + 2};
  }
};

// GGUF Q4_0 block: f16 scale, then 16 bytes; element j < 16 is the low nibble of byte j, element
// j >= 16 the high nibble of byte j - 16.
struct Q4_0Packed : Q4_0Math {
  static constexpr size_t kBytes = 18;
  template <int R>
  static __m128 scales(const unsigned char* rows, size_t row_bytes, int64_t b) {
    return packed_scales<kBytes, R>(rows, row_bytes, b);
  }
  static Row row(const unsigned char* blk) {
    // Both 128-bit halves get the 16 bytes; the high half shifts right by 4 to bring the high
    // nibbles down, and one mask keeps the nibbles.
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(15));
  }
  // The unpacked tile layout below wants the same bytes.
  static __m256i nibbles(const unsigned char* blk) { return row(blk); }
};

// Unpacked tiles: per block b, kTileRows rows of 32-byte fields, then the rows' f32 scales.
// Rows are 32 bytes apart inside a block (row_bytes = 32 for the tile).
constexpr size_t kUnpackedRowStride = 32;

// Q4_0 unpacked: [u: 4 x 32 B][d: 4 x f32][pad 16 B] = 160 B per block.
struct Q4_0Unpacked : Q4_0Math {
  static constexpr size_t kBytes = 160;
  static constexpr size_t kScales = 128;
  template <int R>
  static __m128 scales(const unsigned char* rows, size_t, int64_t b) {
    return _mm_load_ps(reinterpret_cast<const float*>(rows + static_cast<size_t>(b) * kBytes + kScales));
  }
  static Row row(const unsigned char* blk) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(blk)); }
  static void unpack_block(const unsigned char* const src[kTileRows], unsigned char* dst) {
    for (int r = 0; r < kTileRows; ++r) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + r * kUnpackedRowStride), Q4_0Packed::nibbles(src[r]));
    }
  }
};

// Q8_0 unpacked: [|w|: 4 x 32 B][w: 4 x 32 B][d: 4 x f32][pad 16 B] = 288 B per block.
struct Q8_0Unpacked : Q8_0Math {
  static constexpr size_t kBytes = 288;
  static constexpr size_t kScales = 256;
  template <int R>
  static __m128 scales(const unsigned char* rows, size_t, int64_t b) {
    return _mm_load_ps(reinterpret_cast<const float*>(rows + static_cast<size_t>(b) * kBytes + kScales));
  }
  static Row row(const unsigned char* blk) {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(blk)), blk + kTileRows * kUnpackedRowStride};
  }
  static void unpack_block(const unsigned char* const src[kTileRows], unsigned char* dst) {
    for (int r = 0; r < kTileRows; ++r) {
      const __m256i w = load(src[r] + 2);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + r * kUnpackedRowStride), _mm256_sign_epi8(w, w));
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (kTileRows + r) * kUnpackedRowStride), w);
    }
  }
};

template <class Packed>
struct UnpackedOf;
template <>
struct UnpackedOf<Q4_0Packed> {
  using type = Q4_0Unpacked;
};
template <>
struct UnpackedOf<Q8_0Packed> {
  using type = Q8_0Unpacked;
};

// Prefetches, over the n_blocks steps of a tile, the kTileRows rows that follow it: the rows
// are short (1-3 KB), so the hardware prefetcher sees several brief streams per tile and never
// gets ahead; prefetching one tile ahead nearly doubled batch-1 decode.
template <size_t kPackedBytes>
inline void prefetch_next_tile(const unsigned char* next, int64_t b) {
  constexpr size_t kStep = kTileRows * kPackedBytes;  // bytes of the next tile per block step
  const char* p = reinterpret_cast<const char*>(next + static_cast<size_t>(b) * kStep);
  _mm_prefetch(p, _MM_HINT_T0);
  if constexpr (kStep > 64) _mm_prefetch(p + 64, _MM_HINT_T0);
}

// y[t * y_stride + r] = dot(row r, token t) for an R x T tile (R <= 4). rows, row_bytes: as the
// policy reads them; x: T tokens of x_stride blocks each. kPrefetchBytes > 0: prefetch the next
// packed tile (blocks of that many bytes) while working.
template <class Blocks, int R, int T, size_t kPrefetchBytes>
void tile(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_blocks, float* y,
          int64_t y_stride) {
  // Every loop over R and T is unrolled so the accumulators live in registers (a rolled loop
  // keeps acc[][] on the stack and runs at the speed of store-to-load forwarding).
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  alignas(16) float scale[T][4];  // d_w(row r) * d_x(token t), this block
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (kPrefetchBytes > 0) prefetch_next_tile<kPrefetchBytes>(rows + R * row_bytes, b);
    // d_w * d_x rounded once per product, as the scalar reference does; one multiply serves
    // four rows, and the products are broadcast back from memory (a load, not a shuffle).
    const __m128 dw = Blocks::template scales<R>(rows, row_bytes, b);
    typename Blocks::Token tk[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const Q8Block& xb = x[t * x_stride + b];
      _mm_store_ps(scale[t], _mm_mul_ps(dw, _mm_broadcast_ss(&xb.d)));
      tk[t] = Blocks::token(xb);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const auto w = Blocks::row(rows + r * row_bytes + static_cast<size_t>(b) * Blocks::kBytes);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 sums = _mm256_cvtepi32_ps(Blocks::lanes(w, x[t * x_stride + b], tk[t]));
        acc[r][t] = _mm256_fmadd_ps(sums, _mm256_broadcast_ss(&scale[t][r]), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = hsum(acc[r][t]);
}

// Tokens per tile in a batch: two, so a 4 x 2 tile's accumulators, the per-token terms and the
// temporaries fit the 16 ymm registers.
constexpr int kTileTokens = 2;

// All n_tokens tokens against R rows read through policy Blocks; kPrefetchBytes as in tile()
// (only the first token tile prefetches: the others find the rows in cache).
template <class Blocks, int R, size_t kPrefetchBytes>
void tile_tokens(const unsigned char* rows, size_t row_bytes, const Q8Block* x, int64_t x_stride, int64_t n_tokens,
                 int64_t n_blocks, float* y, int64_t y_stride) {
  int64_t t = 0;
  if (n_tokens >= kTileTokens) {
    tile<Blocks, R, kTileTokens, kPrefetchBytes>(rows, row_bytes, x, x_stride, n_blocks, y, y_stride);
    t = kTileTokens;
  }
  for (; t + kTileTokens <= n_tokens; t += kTileTokens) {
    tile<Blocks, R, kTileTokens, 0>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
  }
  if (t == 0 && t < n_tokens) {
    tile<Blocks, R, 1, kPrefetchBytes>(rows, row_bytes, x, x_stride, n_blocks, y, y_stride);
    ++t;
  }
  for (; t < n_tokens; ++t) {
    tile<Blocks, R, 1, 0>(rows, row_bytes, x + t * x_stride, x_stride, n_blocks, y + t * y_stride, y_stride);
  }
}

// Copies the kTileRows rows at `rows` into the Unpacked layout at dst (n_blocks * kBytes, 32-byte
// aligned), prefetching the tile after them as it goes.
template <class Packed>
void unpack_tile(const unsigned char* rows, size_t row_bytes, int64_t n_blocks, unsigned char* dst) {
  using Unpacked = typename UnpackedOf<Packed>::type;
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_next_tile<Packed::kBytes>(rows + kTileRows * row_bytes, b);
    const unsigned char* src[kTileRows];
    for (int r = 0; r < kTileRows; ++r) src[r] = rows + r * row_bytes + static_cast<size_t>(b) * Packed::kBytes;
    unsigned char* out = dst + static_cast<size_t>(b) * Unpacked::kBytes;
    Unpacked::unpack_block(src, out);
    _mm_store_ps(reinterpret_cast<float*>(out + Unpacked::kScales),
                 Packed::template scales<kTileRows>(rows, row_bytes, b));
  }
}

template <class Packed>
void matmul_blocks(const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x, int64_t x_stride,
                   int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride, std::span<std::byte> scratch) {
  using Unpacked = typename UnpackedOf<Packed>::type;
  const bool unpack =
      n_tokens >= kInt8UnpackMinTokens &&
      scratch.size() >= int8_unpack_scratch_bytes(Packed::kBytes == 34 ? TensorType::Q8_0 : TensorType::Q4_0, n_blocks);
  auto* tile_copy = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 31) / 32 * 32);
  int64_t r = 0;
  for (; r + kTileRows <= n_rows; r += kTileRows) {
    const unsigned char* tr = rows + r * row_bytes;
    if (unpack) {
      unpack_tile<Packed>(tr, row_bytes, n_blocks, tile_copy);
      tile_tokens<Unpacked, kTileRows, 0>(tile_copy, kUnpackedRowStride, x, x_stride, n_tokens, n_blocks, y + r,
                                          y_stride);
    } else {
      tile_tokens<Packed, kTileRows, Packed::kBytes>(tr, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
    }
  }
  for (; r < n_rows; ++r) {
    tile_tokens<Packed, 1, 0>(rows + r * row_bytes, row_bytes, x, x_stride, n_tokens, n_blocks, y + r, y_stride);
  }
}

}  // namespace

size_t int8_unpack_scratch_bytes(TensorType type, int64_t n_blocks) {
  const size_t per_block = type == TensorType::Q8_0 ? Q8_0Unpacked::kBytes : Q4_0Unpacked::kBytes;
  return static_cast<size_t>(n_blocks) * per_block + 32;  // + 32: room to align the start
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
