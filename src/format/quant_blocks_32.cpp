// Row converters for the 32-element block types Q4_1, Q5_0, Q5_1 and IQ4_NL (layouts in
// quant_blocks.h). The dequantizers do ggml's arithmetic operation for operation (d*q + m is a
// product then a sum, never fused), so they give its bits.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "format/quant_blocks.h"

namespace peregrine::quant {
namespace {

constexpr int kQK = 32;

// Element j's 4-bit value of a Q4_0-style nibble array qs (j < 32).
int nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4); }

// Packs 32 values (each < 16) into a Q4_0-style nibble array.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// Packs the fifth bits of 32 values (each < 32) into Q5's 32-bit qh word.
void pack_high_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < kQK; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}

// Asymmetric blocks (Q4_1, Q5_1): m = the block's minimum, d = range / levels; q rounds
// (x - m) / d with the stored (fp16) d and m, so the rounding of d and m is part of the fit.
void quantize_affine(const float* x, int levels, uint8_t* d_at, uint8_t* m_at, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  store_u16(d_at, fp32_to_fp16((hi - lo) / static_cast<float>(levels)));
  store_u16(m_at, fp32_to_fp16(lo));
  const float d = load_half(d_at), m = load_half(m_at);
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(nearest_int((x[j] - m) * id), 0, levels));
}

}  // namespace

int nearest_int(float x) { return static_cast<int>(std::lround(x)); }

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += q4_1::kBytes, dst += kQK) {
    const float d = load_half(src + q4_1::kD), m = load_half(src + q4_1::kM);
    for (int j = 0; j < kQK; ++j) {
      const float scaled = static_cast<float>(nibble(src + q4_1::kQs, j)) * d;
      dst[j] = scaled + m;
    }
  }
}

void dequantize_q5_0(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += q5_0::kBytes, dst += kQK) {
    const float d = load_half(src + q5_0::kD);
    const uint32_t qh = load_u32(src + q5_0::kQh);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(src + q5_0::kQs, j) | static_cast<int>(((qh >> j) & 1) << 4);
      dst[j] = static_cast<float>(q - 16) * d;
    }
  }
}

void dequantize_q5_1(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += q5_1::kBytes, dst += kQK) {
    const float d = load_half(src + q5_1::kD), m = load_half(src + q5_1::kM);
    const uint32_t qh = load_u32(src + q5_1::kQh);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(src + q5_1::kQs, j) | static_cast<int>(((qh >> j) & 1) << 4);
      const float scaled = static_cast<float>(q) * d;
      dst[j] = scaled + m;
    }
  }
}

void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += iq4_nl::kBytes, dst += kQK) {
    const float d = load_half(src + iq4_nl::kD);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(kIq4nlValues[nibble(src + iq4_nl::kQs, j)]);
  }
}

void quantize_q4_1(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK, dst += q4_1::kBytes) {
    std::array<uint8_t, kQK> q{};
    quantize_affine(src, 15, dst + q4_1::kD, dst + q4_1::kM, q.data());
    pack_nibbles(q.data(), dst + q4_1::kQs);
  }
}

void quantize_q5_1(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK, dst += q5_1::kBytes) {
    std::array<uint8_t, kQK> q{};
    quantize_affine(src, 31, dst + q5_1::kD, dst + q5_1::kM, q.data());
    pack_nibbles(q.data(), dst + q5_1::kQs);
    pack_high_bits(q.data(), dst + q5_1::kQh);
  }
}

// Symmetric, as Q4_0: the element of largest magnitude maps to -16 exactly (its sign in d).
void quantize_q5_0(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK, dst += q5_0::kBytes) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    store_u16(dst + q5_0::kD, fp32_to_fp16(max / -16.f));
    const float d = load_half(dst + q5_0::kD);
    const float id = d != 0.f ? 1.f / d : 0.f;
    std::array<uint8_t, kQK> q{};
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(nearest_int(src[j] * id) + 16, 0, 31));
    pack_nibbles(q.data(), dst + q5_0::kQs);
    pack_high_bits(q.data(), dst + q5_0::kQh);
  }
}

void quantize_iq4_nl(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK, dst += iq4_nl::kBytes) {
    std::array<uint8_t, kQK> idx{};
    const float d = iq4_fit_block(src, idx.data());
    store_u16(dst + iq4_nl::kD, fp32_to_fp16(d));
    // Re-pick the indices for the stored (fp16) scale.
    const float ds = load_half(dst + iq4_nl::kD);
    const float id = ds != 0.f ? 1.f / ds : 0.f;
    for (int j = 0; j < kQK; ++j) idx[j] = static_cast<uint8_t>(iq4_nearest_index(src[j] * id));
    pack_nibbles(idx.data(), dst + iq4_nl::kQs);
  }
}

int iq4_nearest_index(float x) {
  if (!(x > kIq4nlValues[0])) return 0;  // also NaN
  if (x >= kIq4nlValues[15]) return 15;
  int i = 0;
  while (x > kIq4nlValues[i + 1]) ++i;  // kIq4nlValues[i] < x <= kIq4nlValues[i + 1]
  return x - kIq4nlValues[i] < kIq4nlValues[i + 1] - x ? i : i + 1;
}

float iq4_fit_block(const float* x, uint8_t* idx) {
  constexpr int n = kQK;
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.f) {
    std::fill(idx, idx + n, static_cast<uint8_t>(iq4_nearest_index(0.f)));
    return 0.f;
  }
  // Candidate inverse scales map max onto -127 + t for t in -7..7 (t = 0: onto the range's end;
  // the values are not symmetric, so the other end (+113) is tried as well).
  float best_d = 0.f, best_err = INFINITY;
  std::array<uint8_t, n> trial{};
  auto try_scale = [&](float id) {
    float sum_xv = 0.f, sum_vv = 0.f;
    for (int j = 0; j < n; ++j) {
      trial[static_cast<size_t>(j)] = static_cast<uint8_t>(iq4_nearest_index(x[j] * id));
      const float v = kIq4nlValues[trial[static_cast<size_t>(j)]];
      sum_xv += x[j] * v;
      sum_vv += v * v;
    }
    const float d = sum_vv > 0.f ? sum_xv / sum_vv : 0.f;  // least squares for these indices
    float err = 0.f;
    for (int j = 0; j < n; ++j) {
      const float e = x[j] - d * kIq4nlValues[trial[static_cast<size_t>(j)]];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_d = d;
      std::copy(trial.begin(), trial.begin() + n, idx);
    }
  };
  for (int t = -7; t <= 7; ++t) try_scale(static_cast<float>(kIq4nlValues[0] + t) / max);
  try_scale(static_cast<float>(kIq4nlValues[15]) / max);
  return best_d;
}

}  // namespace peregrine::quant
