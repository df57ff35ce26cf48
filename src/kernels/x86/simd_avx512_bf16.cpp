// The bf16 GEMM (F16/BF16 weights, bf16 activations) in the order simd_avx512_bf16.h documents.
// Built with the AVX-512 flags plus -mavx512bf16 (see CMakeLists.txt); like simd_avx512.cpp, free
// of inline library templates, so no instantiation with these instructions can reach other callers.
#include "kernels/x86/simd_avx512_bf16.h"

#include <immintrin.h>

#include "kernels/x86/simd_avx512_inline.h"
#include "kernels/x86/simd_avx512_sums.h"
#include "kernels/x86/simd_tiles.h"

namespace peregrine::avx512 {
namespace {

// Lanes [0, n) of a 32-lane mask (n <= 32).
inline __mmask32 first_lanes32(int64_t n) { return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1u; }

// Loaders: 32 weights starting at element i as bf16 (load32), or the first `mask` of them with
// the others 0 (load_part, for the ragged last chunk; never reads past the row).
struct BF16Row {
  const uint16_t* w;
  __m512bh load32(int64_t i) const { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + i)); }
  __m512bh load_part(int64_t i, __mmask32 mask) const {
    return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + i));
  }
};
// F16 weights, widened exactly and rounded to bf16 as they are read.
struct F16Row {
  const uint16_t* w;
  static __m512bh convert(__m512i h) {
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    return _mm512_cvtne2ps_pbh(hi, lo);  // lo's 16 values become the low half
  }
  __m512bh load32(int64_t i) const { return convert(_mm512_loadu_si512(w + i)); }
  __m512bh load_part(int64_t i, __mmask32 mask) const { return convert(_mm512_maskz_loadu_epi16(mask, w + i)); }
};

// Tile shapes: one or two tokens stream 8 rows (8 or 16 accumulators, enough chains to cover the
// latency of vdpbf16ps; 8 rows measured best for decode, without software prefetch); more tokens
// take 4 rows x up to 6 tokens (24 accumulators + 4 weight vectors + 1 activation vector).
constexpr int kDecodeRows = 8;
constexpr int kRows = 4;
constexpr int kTokens = 6;
// Tokens per pass over a thread's rows: 60 tokens of a 5632-long row are 676 KB of bf16, which
// stay in the 1 MB L2 while the rows stream past.
constexpr int64_t kTokenBlock = 10 * kTokens;

// One R x T tile: y[t * y_stride + r] = dot(row r, token t) in the documented order. Never
// inlined, as float_tile (simd_avx512.cpp) for the same reason.
template <class Row, int R, int T>
[[gnu::noinline]] void bf16_tile(const Row* rows, const uint16_t* x, int64_t x_stride, int64_t n, float* y,
                                 int64_t y_stride) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const auto step = [&](int64_t i, __mmask32 mask, bool full) [[gnu::always_inline]] {
    __m512bh w[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      w[r] = full ? rows[r].load32(i) : rows[r].load_part(i, mask);
      // Keeps each weight vector in a register (as float_tile does).
      if constexpr (T > 1) __asm__("" : "+v"(w[r]));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint16_t* xt = x + t * x_stride + i;
      const __m512bh xv =
          reinterpret_cast<__m512bh>(full ? _mm512_loadu_si512(xt) : _mm512_maskz_loadu_epi16(mask, xt));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], w[r], xv);
    }
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) step(i, ~__mmask32{0}, true);
  if (i < n) step(i, first_lanes32(n - i), false);
  if constexpr (R % 4 == 0) {
    store_sums<R, T>(acc, y, y_stride);
  } else {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) y[t * y_stride + r] = hsum16(acc[r][t]);
  }
}

// The tile for n_rows (1..kRows; 1..kDecodeRows for one or two tokens) rows and T tokens.
template <class Row, int T>
void bf16_tile_rows(const Row* rows, int64_t n_rows, const uint16_t* x, int64_t x_stride, int64_t n, float* y,
                    int64_t y_stride) {
  switch (n_rows) {
    case 1:
      return bf16_tile<Row, 1, T>(rows, x, x_stride, n, y, y_stride);
    case 2:
      return bf16_tile<Row, 2, T>(rows, x, x_stride, n, y, y_stride);
    case 3:
      return bf16_tile<Row, 3, T>(rows, x, x_stride, n, y, y_stride);
    case 4:
      return bf16_tile<Row, 4, T>(rows, x, x_stride, n, y, y_stride);
    default:
      break;
  }
  if constexpr (T <= 2) {
    switch (n_rows) {
      case 5:
        return bf16_tile<Row, 5, T>(rows, x, x_stride, n, y, y_stride);
      case 6:
        return bf16_tile<Row, 6, T>(rows, x, x_stride, n, y, y_stride);
      case 7:
        return bf16_tile<Row, 7, T>(rows, x, x_stride, n, y, y_stride);
      case 8:
        return bf16_tile<Row, 8, T>(rows, x, x_stride, n, y, y_stride);
      default:
        break;
    }
  }
}

template <class Row>
Row row_at(const unsigned char* base, size_t row_bytes, int64_t r) {
  return Row{reinterpret_cast<const uint16_t*>(base + static_cast<size_t>(r) * row_bytes)};
}

// Rows [r0, r0 + nr) as loaders.
template <class Row, int kMax>
void rows_at(const unsigned char* base, size_t row_bytes, int64_t r0, int64_t nr, Row (&rows)[kMax]) {
  for (int64_t k = 0; k < nr; ++k) rows[k] = row_at<Row>(base, row_bytes, r0 + k);
}

template <class Row>
void bf16_matmul(const unsigned char* base, size_t row_bytes, int64_t n_rows, const uint16_t* x, int64_t x_stride,
                 int64_t n_tokens, int64_t n, float* y, int64_t y_stride) {
  if (n_tokens <= 2) {
    for (int64_t r = 0; r < n_rows; r += kDecodeRows) {
      const int64_t nr = n_rows - r < kDecodeRows ? n_rows - r : kDecodeRows;
      Row rows[kDecodeRows];
      rows_at(base, row_bytes, r, nr, rows);
      if (n_tokens == 1) {
        bf16_tile_rows<Row, 1>(rows, nr, x, x_stride, n, y + r, y_stride);
      } else {
        bf16_tile_rows<Row, 2>(rows, nr, x, x_stride, n, y + r, y_stride);
      }
    }
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
    const int64_t nt = n_tokens - t0 < kTokenBlock ? n_tokens - t0 : kTokenBlock;
    for (int64_t r = 0; r < n_rows; r += kRows) {
      const int64_t nr = n_rows - r < kRows ? n_rows - r : kRows;
      Row rows[kRows];
      rows_at(base, row_bytes, r, nr, rows);
      simd::token_tiles<kTokens>(nt, [&](auto tokens, int64_t t) {
        bf16_tile_rows<Row, decltype(tokens)::value>(rows, nr, x + (t0 + t) * x_stride, x_stride, n,
                                                     y + (t0 + t) * y_stride + r, y_stride);
      });
    }
  }
}

// ---- Rows packed in 16-row groups (kernels/bf16_pack.h) ----

// Tile shapes: batches take 2 groups (32 rows) x up to 12 tokens (24 accumulators, 2 weight
// vectors, the broadcasts). A thread's rows pass in such 32-row blocks, each meeting every token
// of the call while its 2 x 32n bytes (360 KB at n = 5632) stay in L2, so the weights come from
// memory once per call and the activations from L3. One or two tokens take 4 groups at a time:
// 4 or 8 independent chains, 4 streams.
constexpr int kGroups = 2;
constexpr int kGroupTokens = 12;
constexpr int kDecodeGroups = 4;

// Token t's pair (2p, 2p + 1) in every 32-bit lane; `last` of an odd n: element 2p alone (the
// packed weights' element n is zero, the activation row's is not written).
inline __m512bh pair_at(const uint16_t* xt, int64_t p) {
  return reinterpret_cast<__m512bh>(_mm512_broadcastd_epi32(_mm_loadu_si32(xt + 2 * p)));
}
inline __m512bh last_at(const uint16_t* xt, int64_t p) {
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xt[2 * p])));
}

// One G-group x T-token tile: y[t * y_stride + 16g + j] = the chain of row 16g + j, token t, over
// every pair in order (the header's order). w: the first group's vectors (np per group); `last`:
// the lanes of group G - 1 to store (rows of a ragged end).
template <int G, int T>
[[gnu::noinline]] void group_tile(const __m512bh* w, int64_t np, const uint16_t* x, int64_t x_stride, int64_t n,
                                  float* y, int64_t y_stride, __mmask16 last) {
  __m512 acc[G][T];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  const auto step = [&](int64_t p, bool odd_end) [[gnu::always_inline]] {
    __m512bh wv[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) wv[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + g * np + p));
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      const __m512bh b = odd_end ? last_at(x + t * x_stride, p) : pair_at(x + t * x_stride, p);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][t] = _mm512_dpbf16_ps(acc[g][t], wv[g], b);
    }
  };
  const int64_t full = n / 2;
  for (int64_t p = 0; p < full; ++p) step(p, false);
  if (n % 2 != 0) step(full, true);
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      float* out = y + t * y_stride + 16 * g;
      if (g == G - 1 && last != 0xFFFF) {
        _mm512_mask_storeu_ps(out, last, acc[g][t]);
      } else {
        _mm512_storeu_ps(out, acc[g][t]);
      }
    }
  }
}

// The tile for 1..kMax groups (a compile-time bound, so each T instantiates only what it uses).
template <int kMax, int T>
void group_tile_n(int64_t groups, const __m512bh* w, int64_t np, const uint16_t* x, int64_t x_stride, int64_t n,
                  float* y, int64_t y_stride, __mmask16 last) {
  if constexpr (kMax > 1) {
    if (groups < kMax) return group_tile_n<kMax - 1, T>(groups, w, np, x, x_stride, n, y, y_stride, last);
  }
  group_tile<kMax, T>(w, np, x, x_stride, n, y, y_stride, last);
}

}  // namespace

void matmul_bf16_groups(const void* groups, int64_t r0, int64_t r1, const uint16_t* x, int64_t x_stride,
                        int64_t n_tokens, int64_t n, float* y, int64_t y_stride) {
  const int64_t np = (n + 1) / 2;
  const auto* w = static_cast<const __m512bh*>(groups) + r0 / 16 * np;
  const int64_t n_groups = (r1 - r0 + 15) / 16;
  const int64_t step = n_tokens <= 2 ? kDecodeGroups : kGroups;
  for (int64_t g = 0; g < n_groups; g += step) {
    const int64_t ng = n_groups - g < step ? n_groups - g : step;
    // Rows of the block's last group that exist: all 16 but at a ragged end.
    const int64_t end = r1 - r0 - 16 * (g + ng - 1);
    const __mmask16 last = end >= 16 ? __mmask16{0xFFFF} : first_lanes(end);
    const __m512bh* wg = w + g * np;
    float* yg = y + 16 * g;
    if (n_tokens == 1) {
      group_tile_n<kDecodeGroups, 1>(ng, wg, np, x, x_stride, n, yg, y_stride, last);
    } else if (n_tokens == 2) {
      group_tile_n<kDecodeGroups, 2>(ng, wg, np, x, x_stride, n, yg, y_stride, last);
    } else {
      simd::token_tiles<kGroupTokens>(n_tokens, [&](auto tokens, int64_t t) {
        group_tile_n<kGroups, decltype(tokens)::value>(ng, wg, np, x + t * x_stride, x_stride, n, yg + t * y_stride,
                                                       y_stride, last);
      });
    }
  }
}

void round_to_bf16(const float* x, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<__m256i>(b));
  }
  if (i < n) {
    const __mmask16 mask = first_lanes(n - i);
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i));
    _mm256_mask_storeu_epi16(dst + i, mask, reinterpret_cast<__m256i>(b));
  }
}

void matmul_bf16(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const uint16_t* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n, float* y, int64_t y_stride) {
  const auto* base = static_cast<const unsigned char*>(rows);
  if (type == TensorType::F16)
    return bf16_matmul<F16Row>(base, row_bytes, n_rows, x, x_stride, n_tokens, n, y, y_stride);
  if (type == TensorType::BF16)
    return bf16_matmul<BF16Row>(base, row_bytes, n_rows, x, x_stride, n_tokens, n, y, y_stride);
}

float bf16_peak_loop(int64_t iters) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(-1e-4f));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
    __asm__ volatile("" : "+v"(a), "+v"(b));
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  return hsum16(s);
}

}  // namespace peregrine::avx512
