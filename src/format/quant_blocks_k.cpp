// Row converters for the 256-element super-block types Q2_K, Q3_K, Q5_K and IQ4_XS (layouts in
// quant_blocks.h), and the affine sub-block fit Q4_K shares with Q5_K. The dequantizers do ggml's
// arithmetic operation for operation, so they give its bits.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "format/quant_blocks.h"

namespace peregrine::quant {
namespace {

constexpr int kQK_K = 256;

// Largest |v| of n values, with its sign.
float signed_absmax(const float* v, int n) {
  float amax = 0.f, max = 0.f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(v[i]) > amax) {
      amax = std::fabs(v[i]);
      max = v[i];
    }
  }
  return max;
}

// Element l of sub-block j's two low bits in a Q2_K / Q3_K qs array.
int two_bits(const uint8_t* qs, int j, int l) { return (qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3; }

}  // namespace

// ---- Q2_K: per 16 elements d*sc*q - dmin*m, q in 0..3, 4-bit sc and m.
void dequantize_q2_k(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += q2_k::kBytes) {
    const float d = load_half(src + q2_k::kD), dmin = load_half(src + q2_k::kDmin);
    for (int j = 0; j < 8; ++j) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = src[q2_k::kScales + 2 * j + half];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const float scaled = dl * static_cast<float>(two_bits(src + q2_k::kQs, j, l));
          *dst++ = scaled - ml;
        }
      }
    }
  }
}

// Per 16 elements an affine fit over [min(0, lo), hi] (3 steps); scales and mins to 4 bits
// against the block's largest; elements re-quantized with the rounded scales.
void quantize_q2_k(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK_K, dst += q2_k::kBytes) {
    std::array<float, 16> scale{}, mins{};
    for (int g = 0; g < 16; ++g) {
      const float* x = src + 16 * g;
      const float lo = std::min(0.f, *std::min_element(x, x + 16)), hi = *std::max_element(x, x + 16);
      scale[g] = (hi - lo) / 3.f;
      mins[g] = -lo;
    }
    const float max_scale = *std::max_element(scale.begin(), scale.end());
    const float max_min = *std::max_element(mins.begin(), mins.end());
    store_u16(dst + q2_k::kD, fp32_to_fp16(max_scale / 15.f));
    store_u16(dst + q2_k::kDmin, fp32_to_fp16(max_min / 15.f));
    const float d = load_half(dst + q2_k::kD), dmin = load_half(dst + q2_k::kDmin);
    const float inv_scale = max_scale > 0 ? 15.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 15.f / max_min : 0.f;
    uint8_t* qs = dst + q2_k::kQs;
    std::memset(qs, 0, 64);
    for (int g = 0; g < 16; ++g) {
      const int ls = std::min(15, nearest_int(inv_scale * scale[g]));
      const int lm = std::min(15, nearest_int(inv_min * mins[g]));
      dst[q2_k::kScales + g] = static_cast<uint8_t>(ls | (lm << 4));
      const float ds = d * static_cast<float>(ls), dm = dmin * static_cast<float>(lm);
      const int j = g / 2;
      for (int i = 0; i < 16; ++i) {
        const int q = ds != 0.f ? std::clamp(nearest_int((src[16 * g + i] + dm) / ds), 0, 3) : 0;
        const int l = 16 * (g % 2) + i;
        qs[32 * (j / 4) + l] |= static_cast<uint8_t>(q << (2 * (j % 4)));
      }
    }
  }
}

// ---- Q3_K: per 16 elements d*(sc-32)*w, w in -4..3 (two low bits, and -4 unless hmask's bit).
void dequantize_q3_k(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += q3_k::kBytes) {
    const float d = load_half(src + q3_k::kD);
    int8_t sc[16];
    q3_k_scales(src + q3_k::kScales, sc);
    for (int j = 0; j < 8; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(sc[2 * j + half]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int high = (src[q3_k::kHmask + l] >> j) & 1;
          *dst++ = dl * static_cast<float>(two_bits(src + q3_k::kQs, j, l) - (high ? 0 : 4));
        }
      }
    }
  }
}

// Symmetric per 16 elements (the largest magnitude maps to -4), the 16 scales then to 6 bits
// against the largest one (which maps to -32), elements re-quantized with the rounded scales.
void quantize_q3_k(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK_K, dst += q3_k::kBytes) {
    std::memset(dst, 0, q3_k::kBytes);
    std::array<float, 16> scale{};
    for (int g = 0; g < 16; ++g) scale[g] = signed_absmax(src + 16 * g, 16) / -4.f;
    const float max_scale = signed_absmax(scale.data(), 16);
    if (max_scale == 0.f) continue;  // d = 0: every element decodes to 0
    const float iscale = -32.f / max_scale;
    store_u16(dst + q3_k::kD, fp32_to_fp16(1.f / iscale));
    const float d = load_half(dst + q3_k::kD);
    uint8_t* packed = dst + q3_k::kScales;
    for (int g = 0; g < 16; ++g) {
      const int ls = std::clamp(nearest_int(iscale * scale[g]), -32, 31);
      const int u = ls + 32;
      packed[g % 8] |= static_cast<uint8_t>((u & 0xF) << (4 * (g / 8)));
      packed[8 + g % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (g / 4)));
      const float ds = d * static_cast<float>(ls);
      const int j = g / 2;
      for (int i = 0; i < 16; ++i) {
        const int w = ds != 0.f ? std::clamp(nearest_int(src[16 * g + i] / ds), -4, 3) : 0;
        const int v = w + 4, l = 16 * (g % 2) + i;  // v = low bits + 4 * third bit
        dst[q3_k::kQs + 32 * (j / 4) + l] |= static_cast<uint8_t>((v & 3) << (2 * (j % 4)));
        dst[q3_k::kHmask + l] |= static_cast<uint8_t>((v >> 2) << j);
      }
    }
  }
}

// ---- Q4_K / Q5_K: per 32 elements d*sc*q - dmin*m, 6-bit sc and m.
void quantize_k_affine(const float* src, int levels, uint8_t* d_at, uint8_t* dmin_at, uint8_t* scales, uint8_t* L) {
  std::array<float, 8> scale{}, mins{};
  for (int j = 0; j < 8; ++j) {
    const float* x = src + 32 * j;
    const float lo = std::min(0.f, *std::min_element(x, x + 32)), hi = *std::max_element(x, x + 32);
    scale[j] = (hi - lo) / static_cast<float>(levels);
    mins[j] = -lo;
  }
  const float max_scale = *std::max_element(scale.begin(), scale.end());
  const float max_min = *std::max_element(mins.begin(), mins.end());
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::min(63, nearest_int(inv_scale * scale[j]));
    const int lm = std::min(63, nearest_int(inv_min * mins[j]));
    if (j < 4) {
      scales[j] = static_cast<uint8_t>(ls);
      scales[j + 4] = static_cast<uint8_t>(lm);
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  store_u16(d_at, fp32_to_fp16(max_scale / 63.f));
  store_u16(dmin_at, fp32_to_fp16(max_min / 63.f));
  const float d = load_half(d_at), dmin = load_half(dmin_at);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k4_scale_min(j, scales, sc, m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int q = ds != 0.f ? nearest_int((src[32 * j + l] + dm) / ds) : 0;
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, levels));
    }
  }
}

void dequantize_q5_k(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += q5_k::kBytes) {
    const float d = load_half(src + q5_k::kD), dmin = load_half(src + q5_k::kDmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k4_scale_min(j, src + q5_k::kScales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      const uint8_t* ql = src + q5_k::kQs + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        const int q = (j % 2 == 0 ? (ql[l] & 0xF) : (ql[l] >> 4)) + (((src[q5_k::kQh + l] >> j) & 1) << 4);
        const float scaled = d1 * static_cast<float>(q);
        *dst++ = scaled - m1;
      }
    }
  }
}

void quantize_q5_k(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK_K, dst += q5_k::kBytes) {
    std::array<uint8_t, kQK_K> L{};
    quantize_k_affine(src, 31, dst + q5_k::kD, dst + q5_k::kDmin, dst + q5_k::kScales, L.data());
    uint8_t* qh = dst + q5_k::kQh;
    std::memset(qh, 0, 32);
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 32; ++l) qh[l] |= static_cast<uint8_t>((L[32 * j + l] >> 4) << j);
    }
    uint8_t* q = dst + q5_k::kQs;
    for (int i = 0; i < 4; ++i) {
      for (int l = 0; l < 32; ++l) {
        q[32 * i + l] = static_cast<uint8_t>((L[64 * i + l] & 0xF) | ((L[64 * i + 32 + l] & 0xF) << 4));
      }
    }
  }
}

// ---- IQ4_XS: per 32 elements d*(sc-32)*kIq4nlValues[q].
void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += iq4_xs::kBytes) {
    const float d = load_half(src + iq4_xs::kD);
    for (int j = 0; j < 8; ++j, dst += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(src, j));
      const uint8_t* qs = src + iq4_xs::kQs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        dst[l] = dl * static_cast<float>(kIq4nlValues[qs[l] & 0xF]);
        dst[l + 16] = dl * static_cast<float>(kIq4nlValues[qs[l] >> 4]);
      }
    }
  }
}

// Each sub-block's own best scale (iq4_fit_block), the eight scales to 6 bits against the largest
// one (which maps to -32), then the indices again for the rounded scales.
void quantize_iq4_xs(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK_K, dst += iq4_xs::kBytes) {
    std::memset(dst, 0, iq4_xs::kBytes);
    std::array<float, 8> sub{};
    std::array<uint8_t, 32> idx{};
    for (int j = 0; j < 8; ++j) sub[j] = iq4_fit_block(src + 32 * j, idx.data());
    const float max_scale = signed_absmax(sub.data(), 8);
    store_u16(dst + iq4_xs::kD, fp32_to_fp16(max_scale / -32.f));
    const float d = load_half(dst + iq4_xs::kD);
    const float id = d != 0.f ? 1.f / d : 0.f;
    uint16_t scales_h = 0;
    for (int j = 0; j < 8; ++j) {
      const int ls = std::clamp(nearest_int(id * sub[j]), -32, 31);
      const int u = ls + 32;
      dst[iq4_xs::kScalesL + j / 2] |= static_cast<uint8_t>((u & 0xF) << (4 * (j % 2)));
      scales_h = static_cast<uint16_t>(scales_h | ((u >> 4) << (2 * j)));
      const float dl = d * static_cast<float>(ls);
      const float idl = dl != 0.f ? 1.f / dl : 0.f;
      uint8_t* qs = dst + iq4_xs::kQs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        const int lo = iq4_nearest_index(src[32 * j + l] * idl), hi = iq4_nearest_index(src[32 * j + l + 16] * idl);
        qs[l] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
    store_u16(dst + iq4_xs::kScalesH, scales_h);
  }
}

}  // namespace peregrine::quant
