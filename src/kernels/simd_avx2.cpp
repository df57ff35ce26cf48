// Built with -mavx2 -mfma -mf16c (see CMakeLists.txt). Keep this file free of inline library
// templates (std::vector, std::span, ...): their instantiations here would contain AVX2 code that
// the linker could pick for callers on a CPU without AVX2.
#include "kernels/simd_avx2.h"

#include <immintrin.h>

#include <cstring>

namespace peregrine::avx2 {
namespace {

inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                 // (0+4, 1+5, 2+6, 3+7)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));        // (0+4+2+6, 1+5+3+7)
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

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
  for (; i < n; ++i) sum += w.load1(i) * x[i];
  return sum;
}

template <class Row>
inline void dequant_impl(const Row& w, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, w.load8(i));
  for (; i < n; ++i) dst[i] = w.load1(i);
}

}  // namespace

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
    case TensorType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case TensorType::F16: return dequant_impl(F16Row{static_cast<const uint16_t*>(src)}, dst, n);
    case TensorType::BF16: return dequant_impl(BF16Row{static_cast<const uint16_t*>(src)}, dst, n);
    case TensorType::Q8_0: return dequant_impl(Q8_0Row{static_cast<const unsigned char*>(src)}, dst, n);
    case TensorType::Q4_0: return dequant_impl(Q4_0Row{static_cast<const unsigned char*>(src)}, dst, n);
    default: return peregrine::dequantize_row(type, src, dst, n);
  }
}

float dot_row(TensorType type, const void* row, const float* x, int64_t n) {
  switch (type) {
    case TensorType::F32: return dot_impl(F32Row{static_cast<const float*>(row)}, x, n);
    case TensorType::F16: return dot_impl(F16Row{static_cast<const uint16_t*>(row)}, x, n);
    case TensorType::BF16: return dot_impl(BF16Row{static_cast<const uint16_t*>(row)}, x, n);
    case TensorType::Q8_0: return dot_impl(Q8_0Row{static_cast<const unsigned char*>(row)}, x, n);
    case TensorType::Q4_0: return dot_impl(Q4_0Row{static_cast<const unsigned char*>(row)}, x, n);
    default: return 0.f;
  }
}

void axpy(float w, const float* v, float* y, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * v[i];
}

void scale(float s, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(sv, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= s;
}

}  // namespace peregrine::avx2

namespace peregrine::avx2 {
float fma_peak_loop(int64_t iters) {
  __m256 acc[10];
  for (int j = 0; j < 10; ++j) acc[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.9999f), a = _mm256_set1_ps(1e-4f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 10; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 10; ++j) s = _mm256_add_ps(s, acc[j]);
  return hsum(s);
}
}  // namespace peregrine::avx2
