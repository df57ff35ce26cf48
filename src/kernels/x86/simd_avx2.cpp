// Built with -mavx2 -mfma -mf16c (see CMakeLists.txt). Keep this file free of inline library
// templates (std::vector, std::span, ...): their instantiations here would contain AVX2 code that
// the linker could pick for callers on a CPU without AVX2.
#include "kernels/x86/simd_avx2.h"
#include "kv/kv_q4.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/x86/simd_avx2_inline.h"

namespace peregrine::avx2 {
namespace {

// Loaders: 8 weights starting at element i as f32, and one weight (for ragged tails).
struct F32Row {
  const float* w;
  __m256 load8(int64_t i) const { return _mm256_loadu_ps(w + i); }
  float load1(int64_t i) const { return w[i]; }
};
struct F16Row {
  const uint16_t* w;
  __m256 load8(int64_t i) const { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i))); }
  float load1(int64_t i) const { return _cvtsh_ss(w[i]); }
};
struct BF16Row {
  const uint16_t* w;
  __m256 load8(int64_t i) const {
    const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  }
  float load1(int64_t i) const {
    const uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};
// Q8_0 block: fp16 d, int8 q[32]; x = d * q.
struct Q8_0Row {
  const unsigned char* w;
  __m256 load8(int64_t i) const {
    const unsigned char* b = w + (i / 32) * 34;
    const __m256 d = _mm256_set1_ps(half(b));
    __m128i q;
    std::memcpy(&q, b + 2 + i % 32, 8);
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
  float load1(int64_t i) const {
    const unsigned char* b = w + (i / 32) * 34;
    return half(b) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
  }
};
// Q4_0 block: fp16 d, uint8 qs[16]; element j < 16 is the low nibble of qs[j], j >= 16 the high
// nibble of qs[j - 16]; x = d * (nibble - 8).
struct Q4_0Row {
  const unsigned char* w;
  __m256 load8(int64_t i) const {
    const unsigned char* b = w + (i / 32) * 18;
    const int64_t j = i % 32;
    const __m256 d = _mm256_set1_ps(half(b));
    __m128i bytes = _mm_setzero_si128();
    std::memcpy(&bytes, b + 2 + (j & 15), 8);
    __m256i q = _mm256_cvtepu8_epi32(bytes);
    q = j < 16 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
  }
  float load1(int64_t i) const {
    const unsigned char* b = w + (i / 32) * 18;
    const int64_t j = i % 32;
    const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return half(b) * static_cast<float>(q - 8);
  }
};

template <class Row>
inline float dot_impl(const Row& w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(w.load8(i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(w.load8(i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(w.load8(i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(w.load8(i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(w.load8(i), _mm256_loadu_ps(x + i), a0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum = __builtin_fmaf(w.load1(i), x[i], sum);  // one rounding, whatever the compiler contracts
  return sum;
}

template <class Row>
inline void dequant_impl(const Row& w, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, w.load8(i));
  for (; i < n; ++i) dst[i] = w.load1(i);
}

// 8 bytes at p (as unsigned or signed) to 8 floats.
inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
inline __m256 s8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// Q4_K (layout in format/tensor_type.cpp): the same operations as the scalar decoder, element
// for element (d*sc and dmin*m rounded once, then q * d1 - m1), so the same bits.
void dequant_q4_k(const unsigned char* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 144) {
    const float d = half(src), dmin = half(src + 2);
    const unsigned char* sc = src + 4;
    const unsigned char* q = src + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      float dj[2], mj[2];
      for (int k = 0; k < 2; ++k) {
        const int j = is + k;
        const int s6 = j < 4 ? (sc[j] & 63) : ((sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4));
        const int m6 = j < 4 ? (sc[j + 4] & 63) : ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
        dj[k] = d * static_cast<float>(s6);
        mj[k] = dmin * static_cast<float>(m6);
      }
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i mask = _mm256_set1_epi8(15);
      const __m256i lo = _mm256_and_si256(bytes, mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask);
      alignas(32) unsigned char nib[2][32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(nib[0]), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(nib[1]), hi);
      for (int k = 0; k < 2; ++k) {
        const __m256 d1 = _mm256_set1_ps(dj[k]), m1 = _mm256_set1_ps(mj[k]);
        for (int g = 0; g < 32; g += 8) {
          const __m256 qf = u8x8_to_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nib[k] + g)));
          _mm256_storeu_ps(dst + g, _mm256_sub_ps(_mm256_mul_ps(d1, qf), m1));
        }
        dst += 32;
      }
    }
  }
}

// Q6_K: element l of each 128-half's four quarters from ql[l], ql[l+32] (low/high nibbles) and
// the 2-bit fields of qh[l]; value (d * scale) * (q - 32), as the scalar decoder computes it.
void dequant_q6_k(const unsigned char* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 210) {
    const unsigned char* ql = src;
    const unsigned char* qh = src + 128;
    const auto* sc = reinterpret_cast<const signed char*>(src + 192);
    const float d = half(src + 208);
    for (int h = 0; h < 2; ++h, dst += 128, ql += 64, qh += 32, sc += 8) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
      auto hi2 = [&](int shift) {  // bits shift..shift+1 of qh, moved to bits 4-5
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, shift), m2), 4);
      };
      alignas(32) signed char qv[4][32];
      const __m256i quarters[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), hi2(0)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), hi2(2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hi2(4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hi2(6)),
      };
      for (int k = 0; k < 4; ++k) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(qv[k]), _mm256_sub_epi8(quarters[k], k32));
        for (int g = 0; g < 32; g += 8) {
          const __m256 scale = _mm256_set1_ps(d * static_cast<float>(sc[g / 16 + 2 * k]));
          const __m256 qf = s8x8_to_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qv[k] + g)));
          _mm256_storeu_ps(dst + 32 * k + g, _mm256_mul_ps(scale, qf));
        }
      }
    }
  }
}

// One R x T tile of the float-weight GEMM: y[t * y_stride + r] = dot(row r, token t). Each
// output has ONE 8-lane accumulator (lane j takes elements 8i + j, i in order), then the fixed
// hsum tree, then the last n % 8 products in order: the same operations for any R and T, so a
// token's outputs do not depend on how many tokens or rows share the tile. Registers: R*T
// accumulators + R weight vectors; 3 x 4 uses 15 of the 16.
// next: when not null, the R rows after these (contiguous, as rows are in a matrix), prefetched
// a proportional slice per step: decode reads R short rows in lock-step, which the hardware
// prefetcher follows poorly (the int8 kernels measured the same, simd_avx2_int8.cpp).
template <class Row, int R, int T>
void float_tile(const Row* rows, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride,
                const char* next = nullptr) {
  __m256 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  constexpr size_t kStep = R * 8 * sizeof(*Row::w);  // bytes of the next R rows per 8 elements
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (next) {
      const char* p = next + static_cast<size_t>(i / 8) * kStep;
#pragma GCC unroll 4
      for (size_t off = 0; off < kStep; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    }
    __m256 w[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) w[r] = rows[r].load8(i);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * x_stride + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float sum = hsum(acc[r][t]);
      for (int64_t j = i; j < n; ++j) sum = __builtin_fmaf(rows[r].load1(j), x[t * x_stride + j], sum);
      y[t * y_stride + r] = sum;
    }
  }
}

template <class Row, int T>
void float_tile_rows(const Row* rows, int64_t n_rows, const float* x, int64_t x_stride, int64_t n, float* y,
                     int64_t y_stride, const char* next = nullptr) {
  switch (n_rows) {
    case 1:
      return float_tile<Row, 1, T>(rows, x, x_stride, n, y, y_stride);
    case 2:
      return float_tile<Row, 2, T>(rows, x, x_stride, n, y, y_stride);
    case 3:
      return float_tile<Row, 3, T>(rows, x, x_stride, n, y, y_stride);
    case 4:
      if constexpr (T == 1) return float_tile<Row, 4, 1>(rows, x, x_stride, n, y, y_stride);
      break;
    case 5:
      if constexpr (T == 1) return float_tile<Row, 5, 1>(rows, x, x_stride, n, y, y_stride);
      break;
    case 6:
      if constexpr (T == 1) return float_tile<Row, 6, 1>(rows, x, x_stride, n, y, y_stride, next);
      break;
    default:
      break;
  }
}

// Tokens per pass over a thread's rows: 32 tokens of a 5632-long row are 720 KB of f32, which
// mostly stay in L2 while the rows stream past.
constexpr int64_t kFloatTokenBlock = 32;

template <class Row>
void float_matmul(const unsigned char* base, size_t row_bytes, int64_t n_rows, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t n, float* y, int64_t y_stride) {
  // Decode: six independent rows per pass hide the FMA latency; batches: 3 rows x 4 tokens.
  const int64_t row_group = n_tokens == 1 ? 6 : 3;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kFloatTokenBlock) {
    const int64_t t1 = t0 + kFloatTokenBlock < n_tokens ? t0 + kFloatTokenBlock : n_tokens;
    for (int64_t r = 0; r < n_rows; r += row_group) {
      const int64_t nr = n_rows - r < row_group ? n_rows - r : row_group;
      Row rows[6];
      for (int64_t k = 0; k < nr; ++k) rows[k] = Row{reinterpret_cast<decltype(Row::w)>(base + (r + k) * row_bytes)};
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4)
        float_tile_rows<Row, 4>(rows, nr, x + t * x_stride, x_stride, n, y + t * y_stride + r, y_stride);
      const float* xt = x + t * x_stride;
      float* yt = y + t * y_stride + r;
      switch (t1 - t) {
        case 3:
          float_tile_rows<Row, 3>(rows, nr, xt, x_stride, n, yt, y_stride);
          break;
        case 2:
          float_tile_rows<Row, 2>(rows, nr, xt, x_stride, n, yt, y_stride);
          break;
        case 1:
          // Decode (one token): prefetch the next row group while this one streams.
          float_tile_rows<Row, 1>(rows, nr, xt, x_stride, n, yt, y_stride,
                                  n_tokens == 1 && r + 2 * row_group <= n_rows
                                      ? reinterpret_cast<const char*>(base + (r + row_group) * row_bytes)
                                      : nullptr);
          break;
        default:
          break;
      }
    }
  }
}

}  // namespace

bool has_float_gemm(TensorType type) {
  return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
}

void matmul_float(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t n, float* y, int64_t y_stride) {
  const auto* base = static_cast<const unsigned char*>(rows);
  switch (type) {
    case TensorType::F32:
      return float_matmul<F32Row>(base, row_bytes, n_rows, x, x_stride, n_tokens, n, y, y_stride);
    case TensorType::F16:
      return float_matmul<F16Row>(base, row_bytes, n_rows, x, x_stride, n_tokens, n, y, y_stride);
    case TensorType::BF16:
      return float_matmul<BF16Row>(base, row_bytes, n_rows, x, x_stride, n_tokens, n, y, y_stride);
    default:
      return;
  }
}

float dot_f32(const float* a, const float* b, int64_t n) { return dot_impl(F32Row{a}, b, n); }

bool has_fused(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q8_0:
    case TensorType::Q4_0:
      return true;
    default:
      return false;
  }
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16:
      return dequant_impl(F16Row{static_cast<const uint16_t*>(src)}, dst, n);
    case TensorType::BF16:
      return dequant_impl(BF16Row{static_cast<const uint16_t*>(src)}, dst, n);
    case TensorType::Q8_0:
      return dequant_impl(Q8_0Row{static_cast<const unsigned char*>(src)}, dst, n);
    case TensorType::Q4_0:
      return dequant_impl(Q4_0Row{static_cast<const unsigned char*>(src)}, dst, n);
    case TensorType::Q4_K:
      return dequant_q4_k(static_cast<const unsigned char*>(src), dst, n);
    case TensorType::Q6_K:
      return dequant_q6_k(static_cast<const unsigned char*>(src), dst, n);
    default:
      return peregrine::dequantize_row(type, src, dst, n);
  }
}

float dot_row(TensorType type, const void* row, const float* x, int64_t n) {
  switch (type) {
    case TensorType::F32:
      return dot_impl(F32Row{static_cast<const float*>(row)}, x, n);
    case TensorType::F16:
      return dot_impl(F16Row{static_cast<const uint16_t*>(row)}, x, n);
    case TensorType::BF16:
      return dot_impl(BF16Row{static_cast<const uint16_t*>(row)}, x, n);
    case TensorType::Q8_0:
      return dot_impl(Q8_0Row{static_cast<const unsigned char*>(row)}, x, n);
    case TensorType::Q4_0:
      return dot_impl(Q4_0Row{static_cast<const unsigned char*>(row)}, x, n);
    default:
      return 0.f;
  }
}

void axpy(float w, const float* v, float* y, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * v[i];
}

void scale(float s, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(sv, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= s;
}

namespace {

// exp(x) for x in [-87, 88] (the caller clamps): x = n ln2 + r with |r| <= ln2 / 2, e^r by a
// degree-6 polynomial (Cephes' coefficients), 2^n through the exponent (n <= 127: no overflow).
inline __m256 exp_in_range(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so n * ln2_hi is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

// exp(x) for x <= 0; arguments below -87 give ~1e-38 instead of underflowing.
inline __m256 exp_nonpositive(__m256 x) { return exp_in_range(_mm256_max_ps(x, _mm256_set1_ps(-87.0f))); }

// exp(x) clamped to [e^-87, e^88]: the sigmoid and tanh below need no more (1 + e^88 is inf-free,
// and 1 / (1 + e^88) is 0 in float).
inline __m256 exp_clamped(__m256 x) {
  return exp_in_range(_mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f)));
}

// silu(g) * u = g / (1 + e^-g) * u, in ops.cpp's order (divide, then multiply).
inline __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp_clamped(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// gelu(g) * u with gelu's tanh form, tanh(z) = 1 - 2 / (1 + e^2z).
inline __m256 geglu8(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 g2 = _mm256_mul_ps(g, g);
  const __m256 inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g2, one);
  const __m256 z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286535588f), g), inner);
  const __m256 e = exp_clamped(_mm256_add_ps(z, z));
  const __m256 tanh_z = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(one, e)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), _mm256_add_ps(one, tanh_z)), u);
}

template <class Act>
void glu_rows(Act act, const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, act(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i == n) return;
  // The tail through the same vector code, so an element's bits do not depend on where a slice of
  // the row starts or ends (matmul_glu applies it to each thread's rows).
  alignas(32) float g[8] = {}, u[8] = {};
  for (int64_t j = 0; i + j < n; ++j) g[j] = gate[i + j], u[j] = up[i + j];
  _mm256_store_ps(g, act(_mm256_load_ps(g), _mm256_load_ps(u)));
  for (int64_t j = 0; i + j < n; ++j) out[i + j] = g[j];
}

}  // namespace

void glu(Glu kind, const float* gate, const float* up, float* out, int64_t n) {
  if (kind == Glu::Gelu) return glu_rows([](__m256 g, __m256 u) { return geglu8(g, u); }, gate, up, out, n);
  glu_rows([](__m256 g, __m256 u) { return swiglu8(g, u); }, gate, up, out, n);
}

float scale_max(float* s, float scale, int64_t n) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + i), sv);
    _mm256_storeu_ps(s + i, v);
    mv = _mm256_max_ps(mv, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float max = lanes[0];
  for (int j = 1; j < 8; ++j) max = std::max(max, lanes[j]);
  for (; i < n; ++i) {
    s[i] *= scale;
    max = std::max(max, s[i]);
  }
  return max;
}

double sum_exp(const float* x, float m, int64_t n) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 floor = _mm256_set1_ps(-87.0f);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  const auto terms = [&](__m256 v) {
    const __m256 d = _mm256_sub_ps(v, mv);
    // exp_nonpositive clamps at -87 (~1e-38); a term below that (a -inf logit) counts as 0.
    return _mm256_and_ps(exp_nonpositive(d), _mm256_cmp_ps(d, floor, _CMP_GE_OQ));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = terms(_mm256_loadu_ps(x + i));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  if (i < n) {
    alignas(32) float tail[8];
    for (int64_t j = 0; j < 8; ++j) tail[j] = i + j < n ? x[i + j] : -std::numeric_limits<float>::infinity();
    _mm256_store_ps(tail, terms(_mm256_load_ps(tail)));
    for (int64_t j = 0; i + j < n; ++j) sum += static_cast<double>(tail[j]);
  }
  return sum;
}

float exp_shifted(float* s, float m, int64_t n) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  if (i < n) {
    // The tail through the same vector exp (padded with m, whose exp(0) = 1 is dropped).
    alignas(32) float tail[8];
    for (int64_t j = 0; j < 8; ++j) tail[j] = i + j < n ? s[i + j] : m;
    _mm256_store_ps(tail, exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(tail), mv)));
    for (int64_t j = 0; i + j < n; ++j) {
      s[i + j] = tail[j];
      sum += tail[j];
    }
  }
  return sum;
}

void accumulate_rows(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd) {
  int64_t c = 0;
  // Two 8-float columns at a time, held in registers across all n rows.
  for (; c + 16 <= hd; c += 16) {
    __m256 a0 = _mm256_loadu_ps(y + c), a1 = _mm256_loadu_ps(y + c + 8);
    for (int64_t i = 0; i < n; ++i) {
      const __m256 wi = _mm256_broadcast_ss(w + i);
      a0 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(rows[i] + c), a0);
      a1 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(rows[i] + c + 8), a1);
    }
    _mm256_storeu_ps(y + c, a0);
    _mm256_storeu_ps(y + c + 8, a1);
  }
  for (; c + 8 <= hd; c += 8) {
    __m256 a = _mm256_loadu_ps(y + c);
    for (int64_t i = 0; i < n; ++i) a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + i), _mm256_loadu_ps(rows[i] + c), a);
    _mm256_storeu_ps(y + c, a);
  }
  for (; c < hd; ++c) {
    float a = y[c];
    for (int64_t i = 0; i < n; ++i) a += w[i] * rows[i][c];
    y[c] = a;
  }
}

}  // namespace peregrine::avx2

namespace peregrine::avx2 {
float fma_peak_loop(int64_t iters) {
  __m256 acc[10];
  for (int j = 0; j < 10; ++j) acc[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.9999f), a = _mm256_set1_ps(1e-4f);
  for (int64_t i = 0; i < iters; ++i) {
    // Unrolled so the ten chains stay in registers (a rolled loop keeps acc[] on the stack and
    // measures store-to-load forwarding, not the FMA units).
#pragma GCC unroll 10
    for (int j = 0; j < 10; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 10; ++j) s = _mm256_add_ps(s, acc[j]);
  return hsum(s);
}
}  // namespace peregrine::avx2

namespace peregrine::avx2 {

void dequantize_kv_q8_row(const int8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group) {
  for (int64_t b = 0; b < n / group; ++b) {
    const float ds = _cvtsh_ss(scales[b]);
    const __m256 d = _mm256_set1_ps(ds);
    const int8_t* qb = q + b * group;
    float* out = dst + b * group;
    int64_t j = 0;
    for (; j + 8 <= group; j += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qb + j));
      const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      _mm256_storeu_ps(out + j, _mm256_mul_ps(d, x));
    }
    for (; j < group; ++j) out[j] = ds * static_cast<float>(qb[j]);
  }
}

void dequantize_kv_fp8_row(const uint8_t* codes, uint16_t scale, float* dst, int64_t n) {
  const float d = _cvtsh_ss(scale) * 256.f;  // exact: a power of two times an f16
  const __m256 vd = _mm256_set1_ps(d);
  const __m128i sign = _mm_set1_epi16(static_cast<short>(0x80)), magnitude = _mm_set1_epi16(0x7F);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    // f16 bits: sign to bit 15, exponent and mantissa to bits 7..13 (f16's exponent field is one
    // bit wider, so the value is code / 2^8, and E4M3 subnormals land on f16 subnormals).
    const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(c, sign), 8), _mm_slli_epi16(_mm_and_si128(c, magnitude), 7));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtph_ps(h), vd));
  }
  for (; i < n; ++i) {
    const uint16_t h = static_cast<uint16_t>(((codes[i] & 0x80) << 8) | ((codes[i] & 0x7F) << 7));
    dst[i] = _cvtsh_ss(h) * d;
  }
}

void dequantize_kv_q4_row(const uint8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group) {
  if (group != 32) {
    peregrine::dequantize_kv_q4_row(q, scales, dst, n, group);  // small heads' row scales
    return;
  }
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(scales[b]));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 16));
    const __m128i halves[2] = {_mm_sub_epi8(_mm_and_si128(bytes, low), eight),
                               _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight)};
    for (int h = 0; h < 2; ++h) {
      const __m256 x0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(halves[h]));
      const __m256 x1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(halves[h], 8)));
      _mm256_storeu_ps(dst + b * 32 + h * 16, _mm256_mul_ps(d, x0));
      _mm256_storeu_ps(dst + b * 32 + h * 16 + 8, _mm256_mul_ps(d, x1));
    }
  }
}

}  // namespace peregrine::avx2

namespace peregrine::avx2 {
void tile_scores(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                 int64_t s_stride) {
  matmul_float(TensorType::F32, k, static_cast<size_t>(hd) * sizeof(float), n_keys, q, hd, n_queries, hd, scores,
               s_stride);
}
}  // namespace peregrine::avx2
