// The avx512 float GEMM (F32/F16/BF16 weights, f32 activations) in the order simd_avx512.h
// documents, and the probes' peak loops. Built with the AVX-512 flags (see CMakeLists.txt). Keep
// this file free of inline library templates (std::vector, std::min, ...): their instantiations
// here would contain AVX-512 code that the linker could pick for callers on a CPU without it.
#include "kernels/x86/simd_avx512.h"

#include <immintrin.h>

#include "kernels/x86/simd_avx512_inline.h"
#include "kernels/x86/simd_avx512_sums.h"
#include "kernels/x86/simd_tiles.h"

namespace peregrine::avx512 {
namespace {

// Loaders: 16 weights starting at element i as f32 (load16), or the first `mask` lanes of them
// with the others 0 (load_part, for the ragged last group; never reads past the row).
struct F32Row {
  const float* w;
  __m512 load16(int64_t i) const { return _mm512_loadu_ps(w + i); }
  __m512 load_part(int64_t i, __mmask16 mask) const { return _mm512_maskz_loadu_ps(mask, w + i); }
};
struct F16Row {
  const uint16_t* w;
  __m512 load16(int64_t i) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
  }
  __m512 load_part(int64_t i, __mmask16 mask) const { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, w + i)); }
};
struct BF16Row {
  const uint16_t* w;
  static __m512 widen(__m256i bits) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)); }
  __m512 load16(int64_t i) const { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))); }
  __m512 load_part(int64_t i, __mmask16 mask) const { return widen(_mm256_maskz_loadu_epi16(mask, w + i)); }
};

// Tile shapes: one token streams 6 rows (six independent chains cover the FMA latency, and the
// 6 rows it prefetches ahead stay in L1 next to the 6 it reads: 8 measured slower end to end);
// two tokens take 8 rows (16 accumulators, 10 loads per 16 multiply-adds); more tokens take 4
// rows x up to 6 tokens (24 accumulators + 4 weight vectors + 1 activation vector of the 32
// registers).
constexpr int kDecodeRows = 6;
constexpr int kRows = 4;
constexpr int kPairRows = 8;
constexpr int kTokens = 6;
// Tokens per pass over a thread's rows: 36 tokens of a 5632-long row are 810 KB of f32, which
// stay in the 1 MB L2 while the rows stream past; 64 tokens take two passes over the weights.
constexpr int64_t kTokenBlock = 6 * kTokens;

// One R x T tile: y[t * y_stride + r] = dot(row r, token t) in the documented order.
// next: when not null, the R rows after these (contiguous, as rows are in a matrix), prefetched
// a proportional slice per step (decode reads R short rows in lock-step, which the hardware
// prefetcher follows poorly). Never inlined: inlined into the tile loops, the compiler kept some
// shapes' accumulators in memory (three tokens ran slower than four).
template <class Row, int R, int T>
[[gnu::noinline]] void float_tile(const Row* rows, const float* x, int64_t x_stride, int64_t n, float* y,
                                  int64_t y_stride, const char* next) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  constexpr size_t kStep = R * 16 * sizeof(*Row::w);  // bytes of the next R rows per 16 elements
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (next) {
      const char* p = next + static_cast<size_t>(i / 16) * kStep;
#pragma GCC unroll 8
      for (size_t off = 0; off < kStep; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    }
    __m512 w[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      w[r] = rows[r].load16(i);
      // Keeps each weight vector in a register: folded into the multiply-adds as memory
      // operands it would be loaded once per token (three tokens measured slower than four).
      if constexpr (T > 1) __asm__("" : "+v"(w[r]));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * x_stride + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  if (i < n) {
    const __mmask16 mask = first_lanes(n - i);
    __m512 w[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) w[r] = rows[r].load_part(i, mask);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + t * x_stride + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_mask3_fmadd_ps(w[r], xv, acc[r][t], mask);
    }
  }
  if constexpr (R % 4 == 0) {
    store_sums<R, T>(acc, y, y_stride);
  } else {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) y[t * y_stride + r] = hsum16(acc[r][t]);
  }
}

// The tile for n_rows (1..kRows; 1..kDecodeRows for one token, 1..kPairRows for two) rows and T
// tokens.
template <class Row, int T>
void float_tile_rows(const Row* rows, int64_t n_rows, const float* x, int64_t x_stride, int64_t n, float* y,
                     int64_t y_stride, const char* next) {
  if constexpr (T == 2) {
    if (n_rows == kPairRows) return float_tile<Row, kPairRows, 2>(rows, x, x_stride, n, y, y_stride, next);
    if (n_rows > kRows) {  // 5..7: four, then the rest
      float_tile<Row, kRows, 2>(rows, x, x_stride, n, y, y_stride, nullptr);
      return float_tile_rows<Row, 2>(rows + kRows, n_rows - kRows, x, x_stride, n, y + kRows, y_stride, nullptr);
    }
  }
  switch (n_rows) {
    case 1:
      return float_tile<Row, 1, T>(rows, x, x_stride, n, y, y_stride, nullptr);
    case 2:
      return float_tile<Row, 2, T>(rows, x, x_stride, n, y, y_stride, nullptr);
    case 3:
      return float_tile<Row, 3, T>(rows, x, x_stride, n, y, y_stride, nullptr);
    case 4:
      return float_tile<Row, 4, T>(rows, x, x_stride, n, y, y_stride, next);
    default:
      break;
  }
  if constexpr (T == 1) {
    switch (n_rows) {
      case 5:
        return float_tile<Row, 5, 1>(rows, x, x_stride, n, y, y_stride, nullptr);
      case 6:
        return float_tile<Row, 6, 1>(rows, x, x_stride, n, y, y_stride, next);
      default:
        break;
    }
  }
}

template <class Row>
Row row_at(const unsigned char* base, size_t row_bytes, int64_t r) {
  return Row{reinterpret_cast<decltype(Row::w)>(base + static_cast<size_t>(r) * row_bytes)};
}

// The rows of the group after the one at row r, for the tile to prefetch while it streams its
// own; nullptr where that group is not a full one (the ragged last rows are not worth it).
inline const char* next_group(const unsigned char* base, size_t row_bytes, int64_t n_rows, int64_t r, int64_t group) {
  return r + 2 * group <= n_rows ? reinterpret_cast<const char*>(base + static_cast<size_t>(r + group) * row_bytes)
                                 : nullptr;
}

// One token: groups of 6 rows, each prefetching the next group while it streams.
template <class Row>
void float_decode(const unsigned char* base, size_t row_bytes, int64_t n_rows, const float* x, int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; r += kDecodeRows) {
    const int64_t nr = n_rows - r < kDecodeRows ? n_rows - r : kDecodeRows;
    Row rows[kDecodeRows];
    for (int64_t k = 0; k < nr; ++k) rows[k] = row_at<Row>(base, row_bytes, r + k);
    float_tile_rows<Row, 1>(rows, nr, x, 0, n, y + r, 0, next_group(base, row_bytes, n_rows, r, kDecodeRows));
  }
}

template <class Row>
void float_matmul(const unsigned char* base, size_t row_bytes, int64_t n_rows, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t n, float* y, int64_t y_stride) {
  if (n_tokens == 1) return float_decode<Row>(base, row_bytes, n_rows, x, n, y);
  if (n_tokens == 2) {
    for (int64_t r = 0; r < n_rows; r += kPairRows) {
      const int64_t nr = n_rows - r < kPairRows ? n_rows - r : kPairRows;
      Row rows[kPairRows];
      for (int64_t k = 0; k < nr; ++k) rows[k] = row_at<Row>(base, row_bytes, r + k);
      float_tile_rows<Row, 2>(rows, nr, x, x_stride, n, y + r, y_stride,
                              next_group(base, row_bytes, n_rows, r, kPairRows));
    }
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
    const int64_t nt = n_tokens - t0 < kTokenBlock ? n_tokens - t0 : kTokenBlock;
    for (int64_t r = 0; r < n_rows; r += kRows) {
      const int64_t nr = n_rows - r < kRows ? n_rows - r : kRows;
      Row rows[kRows];
      for (int64_t k = 0; k < nr; ++k) rows[k] = row_at<Row>(base, row_bytes, r + k);
      // The first token tile of a group prefetches the next group (the later ones find this group's
      // rows in L1/L2 already).
      const char* next = next_group(base, row_bytes, n_rows, r, kRows);
      simd::token_tiles<kTokens>(nt, [&](auto tokens, int64_t t) {
        float_tile_rows<Row, decltype(tokens)::value>(rows, nr, x + (t0 + t) * x_stride, x_stride, n,
                                                      y + (t0 + t) * y_stride + r, y_stride, t == 0 ? next : nullptr);
      });
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

void tile_scores(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                 int64_t s_stride) {
  matmul_float(TensorType::F32, k, static_cast<size_t>(hd) * sizeof(float), n_keys, q, hd, n_queries, hd, scores,
               s_stride);
}

void accumulate_rows(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd) {
  int64_t c = 0;
  // Two 16-float columns at a time, held in registers across all n rows (a 32-wide head in one
  // pass over the rows, where AVX2 needs two).
  for (; c + 32 <= hd; c += 32) {
    __m512 a0 = _mm512_loadu_ps(y + c), a1 = _mm512_loadu_ps(y + c + 16);
    for (int64_t i = 0; i < n; ++i) {
      const __m512 wi = _mm512_set1_ps(w[i]);
      a0 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(rows[i] + c), a0);
      a1 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(rows[i] + c + 16), a1);
    }
    _mm512_storeu_ps(y + c, a0);
    _mm512_storeu_ps(y + c + 16, a1);
  }
  // The rest 16 at a time, the last ones masked: still one fused multiply-add per term and column.
  for (; c < hd; c += 16) {
    const __mmask16 mask = hd - c >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(hd - c);
    __m512 a = _mm512_maskz_loadu_ps(mask, y + c);
    for (int64_t i = 0; i < n; ++i)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), _mm512_maskz_loadu_ps(mask, rows[i] + c), a);
    _mm512_mask_storeu_ps(y + c, mask, a);
  }
}

float fma_peak_loop(int64_t iters) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.9999f), a = _mm512_set1_ps(1e-4f);
  for (int64_t i = 0; i < iters; ++i) {
    // Unrolled so the chains stay in registers.
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  return hsum16(s);
}

int64_t int8_peak_loop(int64_t iters) {
  __m512i acc[12];
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(j);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
    // Keeps the compiler from treating the operands as loop-invariant.
    __asm__ volatile("" : "+v"(a), "+v"(b));
  }
  __m512i s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, acc[j]);
  return _mm512_reduce_add_epi32(s);
}

}  // namespace peregrine::avx512
