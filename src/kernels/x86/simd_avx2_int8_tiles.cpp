// AVX2 integer dot products of Q4_1, Q5_0, Q5_1, IQ4_NL (32-element blocks) and Q2_K, Q3_K,
// IQ4_XS (256-element super-blocks) weight rows with Q8 activation blocks, on the packed tiles
// alone (sub_block_rows, simd_avx2_int8_inline.h: 4 rows x 2 tokens read in place, every batch
// size; these types have no unpacked-group kernel for batches). Each type is a policy that
// decodes one 32-weight (sub-)block into bytes and reproduces int8_dot.h's terms and order bit
// for bit. Built with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cstring>

#include "format/quant_blocks.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/simd_avx2_inline.h"
#include "kernels/x86/simd_avx2_int8_inline.h"

namespace peregrine::avx2::int8 {
namespace {

namespace q = peregrine::quant;

// The 4 rows' f16 values at byte `at` of block (or super-block) b (lanes >= R are 0).
template <size_t kBytes, int R>
inline __m128 halves_at(const unsigned char* rows, size_t row_bytes, int64_t b, int at) {
  return simd_x86::packed_scales<Tag, kBytes, R>(rows + at, row_bytes, b);
}

// acc + float(isum) * (d * d_x) for the four rows, fused (ScaledBlocks32's step, for the
// super-blocks' d and dmin).
inline __m128 add_scaled(__m128 acc, __m128i isum, __m128 d, const Q8Block& x) {
  return _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(d, _mm_broadcast_ss(&x.d)), acc);
}

struct NoToken {};

// ---- 32-element blocks (kSub = 1: block s is the activation block s).

// Q4_1 / Q5_1: d*q + m. The min adds float(x.sum) * (m * d_x) after the scaled integer sum.
template <bool kFive>
struct Affine32 {
  static constexpr size_t kBytes = kFive ? q::q5_1::kBytes : q::q4_1::kBytes;
  static constexpr int kSub = 1;
  struct Meta {
    __m128 d, m;
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    out.d = halves_at<kBytes, R>(rows, row_bytes, s, 0);
    out.m = halves_at<kBytes, R>(rows, row_bytes, s, 2);
  }
  using Row = __m256i;  // q, 0..15 or 0..31
  using Token = NoToken;
  static Row row(const unsigned char* blk, int) {
    if constexpr (kFive) {
      return _mm256_or_si256(simd_x86::nibbles32<Tag>(blk + q::q5_1::kQs),
                             simd_x86::fifth_bits32<Tag>(blk + q::q5_1::kQh));
    } else {
      return simd_x86::nibbles32<Tag>(blk + q::q4_1::kQs);
    }
  }
  static Token token(const Q8Block&) { return {}; }
  static __m256i lanes(Row u, const Q8Block& x, Token) { return unsigned_lanes(u, x); }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int, const Q8Block& x, Token) {
    const __m128 dx = _mm_broadcast_ss(&x.d);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(mt.d, dx), acc);
    return _mm_fmadd_ps(_mm_set1_ps(static_cast<float>(x.sum)), _mm_mul_ps(mt.m, dx), acc);
  }
};

// Q5_0: d*(q - 16). The unsigned q go into vpmaddubsw and 16 (x_2k + x_2k+1) is subtracted per
// pair (|q x pair| <= 2 * 31 * 127, |16 x pair| <= 4064: int16 holds both and the difference).
struct Q5_0Rows : ScaledBlocks32<q::q5_0::kBytes> {
  using Row = __m256i;    // q, 0..31
  using Token = __m256i;  // 16 (x_2k + x_2k+1)
  static Row row(const unsigned char* blk, int) {
    return _mm256_or_si256(simd_x86::nibbles32<Tag>(blk + q::q5_0::kQs),
                           simd_x86::fifth_bits32<Tag>(blk + q::q5_0::kQh));
  }
  static Token token(const Q8Block& x) { return bias_pairs(16, x); }
  static __m256i lanes(Row u, const Q8Block& x, Token sixteen_x) {
    return offset_lanes(u, x, sixteen_x, _mm256_set1_epi16(1));
  }
};

// IQ4_NL: d * table[q], the table looked up 32 nibbles at a time with vpshufb.
struct Iq4NlRows : ScaledBlocks32<q::iq4_nl::kBytes> {
  using Row = __m256i;  // the signed table values
  using Token = NoToken;
  static Row row(const unsigned char* blk, int) {
    return _mm256_shuffle_epi8(simd_x86::iq4_table<Tag>(), simd_x86::nibbles32<Tag>(blk + q::iq4_nl::kQs));
  }
  static Token token(const Q8Block&) { return {}; }
  static __m256i lanes(Row w, const Q8Block& x, Token) { return signed_lanes(w, x); }
};

// ---- 256-element super-blocks (kSub = 8: sub-block j of block s is activation block 8 s + j).

// Two int8 scales as int16 vpmaddwd factors: elements 0-15 (low 128 bits) take lo, 16-31 hi.
inline __m256i half_scales(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}

// Q3_K: d * s * w per 16 elements, w = (q + 4) - 4 with q + 4 in 0..7 from the low bits and hmask;
// the 4 is subtracted per pair as Q5_0's 16, and each half's scale multiplies in vpmaddwd.
struct Q3_KRows {
  static constexpr size_t kBytes = q::q3_k::kBytes;
  static constexpr int kSub = 8;
  struct Meta {
    __m128 d;
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    out.d = halves_at<kBytes, R>(rows, row_bytes, s, q::q3_k::kD);
  }
  struct Row {
    __m256i u;       // w + 4, 0..7
    __m256i scales;  // s_a for elements 0-15, s_b for 16-31 (-32..31)
  };
  using Token = __m256i;  // 4 (x_2k + x_2k+1)
  static Row row(const unsigned char* blk, int j) {
    // Scales 2j and 2j + 1 (quant_blocks.h's q3_k_scales, two fields only).
    const unsigned char* p = blk + q::q3_k::kScales;
    const auto scale = [p](int i) {
      return (((p[i % 8] >> (4 * (i / 8))) & 0xF) | (((p[8 + i % 4] >> (2 * (i / 4))) & 3) << 4)) - 32;
    };
    return {simd_x86::q3_k_weights<Tag>(blk, j), half_scales(scale(2 * j), scale(2 * j + 1))};
  }
  static Token token(const Q8Block& x) { return bias_pairs(4, x); }
  static __m256i lanes(const Row& r, const Q8Block& x, Token four_x) { return offset_lanes(r.u, x, four_x, r.scales); }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int, const Q8Block& x, Token) {
    return add_scaled(acc, isum, mt.d, x);
  }
};

// Q2_K: d*sc*q - dmin*m per 16 elements, q in 0..3. The scales multiply in vpmaddwd; the mins
// meet the activations' half sums (computed once per token) as m_a * lo + m_b * hi per row.
struct Q2_KRows {
  static constexpr size_t kBytes = q::q2_k::kBytes;
  static constexpr int kSub = 8;
  struct Meta {
    __m128 d, dmin;
    alignas(16) int32_t m_lo[8][4], m_hi[8][4];  // [sub-block][row]: the mins of its two halves
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    out.d = halves_at<kBytes, R>(rows, row_bytes, s, q::q2_k::kD);
    out.dmin = halves_at<kBytes, R>(rows, row_bytes, s, q::q2_k::kDmin);
    for (int r = 0; r < 4; ++r) {
      const unsigned char* sc = rows + r * row_bytes + static_cast<size_t>(s) * kBytes + q::q2_k::kScales;
      for (int j = 0; j < 8; ++j) {
        out.m_lo[j][r] = r < R ? sc[2 * j] >> 4 : 0;
        out.m_hi[j][r] = r < R ? sc[2 * j + 1] >> 4 : 0;
      }
    }
  }
  struct Row {
    __m256i u;       // q, 0..3
    __m256i scales;  // sc_a for elements 0-15, sc_b for 16-31 (0..15)
  };
  struct Token {
    int32_t lo, hi;  // x.q[0..15] and x.q[16..31] summed
  };
  static Row row(const unsigned char* blk, int j) {
    const unsigned char* sc = blk + q::q2_k::kScales + 2 * j;
    return {simd_x86::two_bit_weights<Tag>(blk + q::q2_k::kQs, j), half_scales(sc[0] & 0xF, sc[1] & 0xF)};
  }
  static Token token(const Q8Block& x) {
    const __m256i s = unsigned_lanes(_mm256_set1_epi8(1), x);  // lanes 0-3: elements 0-15
    const __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
    const auto sum4 = [](__m128i v) {
      v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
      return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 1)));
    };
    return {sum4(lo), sum4(hi)};
  }
  static __m256i lanes(const Row& r, const Q8Block& x, Token) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(r.u, load(x.q)), r.scales);
  }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int j, const Q8Block& x, Token tk) {
    acc = add_scaled(acc, isum, mt.d, x);
    const __m128i m_lo = _mm_load_si128(reinterpret_cast<const __m128i*>(mt.m_lo[j]));
    const __m128i m_hi = _mm_load_si128(reinterpret_cast<const __m128i*>(mt.m_hi[j]));
    const __m128i mins =
        _mm_add_epi32(_mm_mullo_epi32(m_lo, _mm_set1_epi32(tk.lo)), _mm_mullo_epi32(m_hi, _mm_set1_epi32(tk.hi)));
    return add_scaled(acc, _mm_sub_epi32(_mm_setzero_si128(), mins), mt.dmin, x);
  }
};

// IQ4_XS: d * s_j * table[q] per 32 elements; s_j * isum is an exact integer below 2^24, so the
// float product of the two is exact (= float(s_j * isum)).
struct Iq4XsRows {
  static constexpr size_t kBytes = q::iq4_xs::kBytes;
  static constexpr int kSub = 8;
  struct Meta {
    __m128 d;
    alignas(16) int32_t s[8][4];  // [sub-block][row]: scale - 32
  };
  template <int R>
  static void meta(const unsigned char* rows, size_t row_bytes, int64_t s, Meta& out) {
    out.d = halves_at<kBytes, R>(rows, row_bytes, s, q::iq4_xs::kD);
    for (int r = 0; r < 4; ++r) {
      const unsigned char* blk = rows + r * row_bytes + static_cast<size_t>(s) * kBytes;
      for (int j = 0; j < 8; ++j) out.s[j][r] = r < R ? q::iq4_xs_scale(blk, j) : 0;
    }
  }
  using Row = __m256i;  // the signed table values
  using Token = NoToken;
  static Row row(const unsigned char* blk, int j) {
    return _mm256_shuffle_epi8(simd_x86::iq4_table<Tag>(), simd_x86::nibbles32<Tag>(blk + q::iq4_xs::kQs + 16 * j));
  }
  static Token token(const Q8Block&) { return {}; }
  static __m256i lanes(Row w, const Q8Block& x, Token) { return signed_lanes(w, x); }
  static __m128 accumulate(__m128 acc, __m128i isum, const Meta& mt, int j, const Q8Block& x, Token) {
    const __m128 s = _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mt.s[j])));
    return _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(isum), s), _mm_mul_ps(mt.d, _mm_broadcast_ss(&x.d)), acc);
  }
};

}  // namespace

void matmul_tiles(TensorType type, const unsigned char* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                  int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride) {
  const auto run = [&](auto policy) {
    sub_block_rows<decltype(policy)>(rows, row_bytes, n_rows, x, x_stride, n_tokens, n_blocks, y, y_stride);
  };
  switch (type) {
    case TensorType::Q4_1:
      return run(Affine32<false>{});
    case TensorType::Q5_1:
      return run(Affine32<true>{});
    case TensorType::Q5_0:
      return run(Q5_0Rows{});
    case TensorType::IQ4_NL:
      return run(Iq4NlRows{});
    case TensorType::Q3_K:
      return run(Q3_KRows{});
    case TensorType::Q2_K:
      return run(Q2_KRows{});
    case TensorType::IQ4_XS:
      return run(Iq4XsRows{});
    default:
      return;
  }
}

}  // namespace peregrine::avx2::int8
