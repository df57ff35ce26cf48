// Type table, half/bfloat conversions and the row (de)quantizers for every supported type.
// Block layouts follow ggml exactly (see tensor_type.h); all multi-byte fields are little-endian
// and read with memcpy because quantized rows are not aligned to their field sizes.
#include "format/tensor_type.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "format/quant_blocks.h"

namespace peregrine {

namespace {

using quant::load_half;
using quant::nearest_int;
using quant::store_u16;

constexpr std::array<TensorTypeInfo, 15> kTypes = {{
    {TensorType::F32, "f32", 1, 4},
    {TensorType::F16, "f16", 1, 2},
    {TensorType::Q4_0, "q4_0", 32, 18},
    {TensorType::Q4_1, "q4_1", 32, quant::q4_1::kBytes},
    {TensorType::Q5_0, "q5_0", 32, quant::q5_0::kBytes},
    {TensorType::Q5_1, "q5_1", 32, quant::q5_1::kBytes},
    {TensorType::Q8_0, "q8_0", 32, 34},
    {TensorType::Q2_K, "q2_K", 256, quant::q2_k::kBytes},
    {TensorType::Q3_K, "q3_K", 256, quant::q3_k::kBytes},
    {TensorType::Q4_K, "q4_K", 256, 144},
    {TensorType::Q5_K, "q5_K", 256, quant::q5_k::kBytes},
    {TensorType::Q6_K, "q6_K", 256, 210},
    {TensorType::IQ4_NL, "iq4_nl", 32, quant::iq4_nl::kBytes},
    {TensorType::IQ4_XS, "iq4_xs", 256, quant::iq4_xs::kBytes},
    {TensorType::BF16, "bf16", 1, 2},
}};
// Kernel layouts: the same bytes per block as their source type, rows interleaved in groups.
constexpr std::array<TensorTypeInfo, 2> kKernelLayouts = {{
    {TensorType::Q4_0_X16, "q4_0_x16", 32, 18},
    {TensorType::Q8_0_X16, "q8_0_x16", 32, 34},
}};

constexpr int kQK4_0 = 32, kQK8_0 = 32, kQK_K = 256;
constexpr size_t kQ4_0Bytes = 18, kQ8_0Bytes = 34, kQ4_KBytes = 144, kQ6_KBytes = 210;

void check_multiple(TensorType type, int64_t n) {
  const auto& info = tensor_type_info(type);
  if (n < 0 || n % info.block_elems != 0)
    throw std::invalid_argument(std::to_string(n) + " elements is not a multiple of the " + std::string(info.name) +
                                " block size " + std::to_string(info.block_elems));
}

// ---- Q4_0: d (fp16) then 16 bytes; low nibbles are elements 0..15, high nibbles 16..31.
void dequantize_q4_0(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQ4_0Bytes, dst += kQK4_0) {
    const float d = load_half(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
      dst[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

void quantize_q4_0(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK4_0, dst += kQ4_0Bytes) {
    // The element of largest magnitude maps to -8 exactly, keeping its sign in d.
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_u16(dst, fp32_to_fp16(d));
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(src[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(src[j + 16] * id + 8.5f));
      dst[2 + j] = static_cast<uint8_t>(std::max(0, lo) | (std::max(0, hi) << 4));
    }
  }
}

// ---- Q8_0: d (fp16) then 32 int8.
void dequantize_q8_0(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQ8_0Bytes, dst += kQK8_0) {
    const float d = load_half(src);
    for (int j = 0; j < kQK8_0; ++j) dst[j] = d * static_cast<float>(static_cast<int8_t>(src[2 + j]));
  }
}

void quantize_q8_0(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK8_0, dst += kQ8_0Bytes) {
    float amax = 0.f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_u16(dst, fp32_to_fp16(d));
    for (int j = 0; j < kQK8_0; ++j)
      dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(nearest_int(src[j] * id), -127, 127)));
  }
}

// ---- Q4_K: d, dmin (fp16); scales[12] packs 8 six-bit scales and 8 six-bit mins; qs[128].
// Sub-block j (32 elements) decodes as d*sc[j]*q - dmin*m[j]. Sub-blocks 2i and 2i+1 share the
// bytes qs[32i..32i+31]: 2i in the low nibbles, 2i+1 in the high nibbles.
void dequantize_q4_k(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQ4_KBytes) {
    const float d = load_half(src);
    const float dmin = load_half(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      int sc, m;
      quant::k4_scale_min(is, scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      quant::k4_scale_min(is + 1, scales, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Per sub-block: affine fit over [min(0, lo), hi] (the offset is kept <= 0 as in ggml so that
// the stored min is non-negative), then both the 8 scales and the 8 mins are quantized to 6 bits
// against the block's largest, and the elements are re-quantized with the rounded scales
// (quant::quantize_k_affine, shared with Q5_K).
void quantize_q4_k(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK_K, dst += kQ4_KBytes) {
    std::array<uint8_t, kQK_K> L{};
    quant::quantize_k_affine(src, 15, dst, dst + 2, dst + 4, L.data());
    uint8_t* q = dst + 16;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// ---- Q6_K: ql[128] low 4 bits, qh[64] high 2 bits, int8 scales[16] (one per 16 elements), d.
// Each 128-element half uses 64 ql bytes and 32 qh bytes: element l (l<32) of its four quarters
// takes ql[l] lo, ql[l+32] lo, ql[l] hi, ql[l+32] hi and bits 0-1, 2-3, 4-5, 6-7 of qh[l].
void dequantize_q6_k(const uint8_t* src, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQ6_KBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_half(src + 208);
    for (int n = 0; n < kQK_K; n += 128, dst += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// Symmetric: per 16 elements the value of largest magnitude maps to -32; the 16 scales are then
// quantized to int8 against the largest one.
void quantize_q6_k(const float* src, uint8_t* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, src += kQK_K, dst += kQ6_KBytes) {
    std::array<float, 16> scale{};
    float max_scale = 0.f, max_abs_scale = 0.f;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.f, max = 0.f;
      for (int l = 0; l < 16; ++l) {
        const float v = src[16 * j + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      scale[j] = max / -32.f;
      if (std::fabs(scale[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scale[j]);
        max_scale = scale[j];
      }
    }
    auto* sc = reinterpret_cast<int8_t*>(dst + 192);
    if (max_abs_scale == 0.f) {
      std::memset(dst, 0, kQ6_KBytes);  // d = 0 decodes every element to 0
      continue;
    }
    const float iscale = -128.f / max_scale;
    store_u16(dst + 208, fp32_to_fp16(1.f / iscale));
    const float d = load_half(dst + 208);
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(std::clamp(nearest_int(iscale * scale[j]), -128, 127));
    std::array<uint8_t, kQK_K> L{};
    for (int j = 0; j < 16; ++j) {
      const float ds = d * static_cast<float>(sc[j]);
      for (int l = 0; l < 16; ++l) {
        const int q = ds != 0.f ? nearest_int(src[16 * j + l] / ds) : 0;
        L[16 * j + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0x0F) | ((q4 & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t raw_type) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == raw_type) return t;
  return std::nullopt;
}

const TensorTypeInfo& tensor_type_info(TensorType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t;
  for (const auto& t : kKernelLayouts)
    if (t.type == type) return t;
  throw std::invalid_argument("unsupported tensor type id " + std::to_string(static_cast<uint32_t>(type)));
}

std::string_view tensor_type_name(TensorType type) { return tensor_type_info(type).name; }

std::optional<TensorType> parse_tensor_type(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i)
      same = std::tolower(static_cast<unsigned char>(name[i])) == std::tolower(static_cast<unsigned char>(t.name[i]));
    if (same) return t.type;
  }
  return std::nullopt;
}

size_t tensor_bytes(TensorType type, int64_t n) {
  check_multiple(type, n);
  const auto& info = tensor_type_info(type);
  const uint64_t blocks = static_cast<uint64_t>(n / info.block_elems);
  const uint64_t per = static_cast<uint64_t>(info.block_bytes);
  if (blocks > std::numeric_limits<size_t>::max() / per)
    throw std::overflow_error("tensor of " + std::to_string(n) + " elements overflows size_t");
  return static_cast<size_t>(blocks * per);
}

void dequantize_row(TensorType type, const void* src_v, float* dst, int64_t n) {
  check_multiple(type, n);
  const auto* src = static_cast<const uint8_t*>(src_v);
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(quant::load_u16(src + 2 * i));
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(quant::load_u16(src + 2 * i));
      return;
    case TensorType::Q4_0:
      return dequantize_q4_0(src, dst, n / kQK4_0);
    case TensorType::Q8_0:
      return dequantize_q8_0(src, dst, n / kQK8_0);
    case TensorType::Q4_K:
      return dequantize_q4_k(src, dst, n / kQK_K);
    case TensorType::Q6_K:
      return dequantize_q6_k(src, dst, n / kQK_K);
    case TensorType::Q4_1:
      return quant::dequantize_q4_1(src, dst, n / 32);
    case TensorType::Q5_0:
      return quant::dequantize_q5_0(src, dst, n / 32);
    case TensorType::Q5_1:
      return quant::dequantize_q5_1(src, dst, n / 32);
    case TensorType::IQ4_NL:
      return quant::dequantize_iq4_nl(src, dst, n / 32);
    case TensorType::Q2_K:
      return quant::dequantize_q2_k(src, dst, n / kQK_K);
    case TensorType::Q3_K:
      return quant::dequantize_q3_k(src, dst, n / kQK_K);
    case TensorType::Q5_K:
      return quant::dequantize_q5_k(src, dst, n / kQK_K);
    case TensorType::IQ4_XS:
      return quant::dequantize_iq4_xs(src, dst, n / kQK_K);
    case TensorType::Q4_0_X16:  // a kernel layout has no rows of its own
    case TensorType::Q8_0_X16:
      break;
  }
  throw std::invalid_argument("dequantize_row: unsupported type");
}

void quantize_row(TensorType type, const float* src, void* dst_v, int64_t n) {
  check_multiple(type, n);
  auto* dst = static_cast<uint8_t*>(dst_v);
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, fp32_to_fp16(src[i]));
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, fp32_to_bf16(src[i]));
      return;
    case TensorType::Q4_0:
      return quantize_q4_0(src, dst, n / kQK4_0);
    case TensorType::Q8_0:
      return quantize_q8_0(src, dst, n / kQK8_0);
    case TensorType::Q4_K:
      return quantize_q4_k(src, dst, n / kQK_K);
    case TensorType::Q6_K:
      return quantize_q6_k(src, dst, n / kQK_K);
    case TensorType::Q4_1:
      return quant::quantize_q4_1(src, dst, n / 32);
    case TensorType::Q5_0:
      return quant::quantize_q5_0(src, dst, n / 32);
    case TensorType::Q5_1:
      return quant::quantize_q5_1(src, dst, n / 32);
    case TensorType::IQ4_NL:
      return quant::quantize_iq4_nl(src, dst, n / 32);
    case TensorType::Q2_K:
      return quant::quantize_q2_k(src, dst, n / kQK_K);
    case TensorType::Q3_K:
      return quant::quantize_q3_k(src, dst, n / kQK_K);
    case TensorType::Q5_K:
      return quant::quantize_q5_k(src, dst, n / kQK_K);
    case TensorType::IQ4_XS:
      return quant::quantize_iq4_xs(src, dst, n / kQK_K);
    case TensorType::Q4_0_X16:
    case TensorType::Q8_0_X16:
      break;
  }
  throw std::invalid_argument("quantize_row: unsupported type");
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  uint32_t bits;
  if (exp == 31)
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN with its payload kept
  else
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u)  // NaN: keep it a (quiet) NaN whatever the payload
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00);  // >= 2^16 or inf
  const uint32_t e = abs >> 23;
  if (abs < 0x38800000u) {               // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero (2^-25 itself ties to even 0)
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = ((e - 112) << 10) | ((abs >> 13) & 0x3FF);
  const uint32_t rem = abs & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry may roll into inf: correct
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

}  // namespace peregrine
