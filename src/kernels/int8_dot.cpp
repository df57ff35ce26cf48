// Portable reference of the integer dot products (int8_dot.h): written for clarity (decode a
// block's integers, then the documented sums), not speed. The SIMD kernels reproduce these bits.
#include "kernels/int8_dot.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "format/quant_blocks.h"

namespace peregrine {
namespace {

float f16_to_f32(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

}  // namespace

void quantize_q8_blocks(const float* x, Q8Block* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    out[b].d = d;
    out[b].sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].q[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
      out[b].sum += out[b].q[i];
    }
  }
}

namespace {

using quant::k4_scale_min;

// Sum of x.q[from..from+15].
int32_t half_sum(const Q8Block& x, int from) {
  int32_t s = 0;
  for (int l = from; l < from + 16; ++l) s += x.q[l];
  return s;
}

// Nibble j (< 32) of a Q4_0-style array: low nibbles are elements 0..15, high nibbles 16..31.
int nibble(const unsigned char* qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

// ---- 32-element blocks: the block's weights as integers w[0..31] and how the block adds to acc.
struct Block32 {
  int32_t w[32];
  float d;
  std::optional<float> m;  // Q4_1 / Q5_1: the offset, added as m * d_x * x.sum
};

Block32 decode_block32(TensorType type, const unsigned char* blk) {
  Block32 b{};
  switch (type) {
    case TensorType::Q8_0:
      for (int j = 0; j < 32; ++j) b.w[j] = static_cast<int8_t>(blk[2 + j]);
      break;
    case TensorType::Q4_0:
      for (int j = 0; j < 32; ++j) b.w[j] = nibble(blk + 2, j) - 8;
      break;
    case TensorType::IQ4_NL:
      for (int j = 0; j < 32; ++j) b.w[j] = quant::kIq4nlValues[nibble(blk + quant::iq4_nl::kQs, j)];
      break;
    case TensorType::Q4_1:
      for (int j = 0; j < 32; ++j) b.w[j] = nibble(blk + quant::q4_1::kQs, j);
      b.m = f16_to_f32(blk + quant::q4_1::kM);
      break;
    case TensorType::Q5_0:
    case TensorType::Q5_1: {
      const bool q5_0 = type == TensorType::Q5_0;
      const uint32_t qh = quant::load_u32(blk + (q5_0 ? quant::q5_0::kQh : quant::q5_1::kQh));
      const unsigned char* qs = blk + (q5_0 ? quant::q5_0::kQs : quant::q5_1::kQs);
      for (int j = 0; j < 32; ++j) b.w[j] = (nibble(qs, j) | static_cast<int>(((qh >> j) & 1) << 4)) - (q5_0 ? 16 : 0);
      if (!q5_0) b.m = f16_to_f32(blk + quant::q5_1::kM);
      break;
    }
    default:
      break;
  }
  b.d = f16_to_f32(blk);  // every 32-element type starts with its f16 d
  return b;
}

float block32_dot(TensorType type, const unsigned char* blk, const Q8Block& x, float acc) {
  const Block32 b = decode_block32(type, blk);
  int32_t isum = 0;
  for (int j = 0; j < 32; ++j) isum += b.w[j] * int32_t(x.q[j]);
  acc = std::fma(static_cast<float>(isum), b.d * x.d, acc);
  if (b.m) acc = std::fma(static_cast<float>(x.sum), *b.m * x.d, acc);
  return acc;
}

// ---- 256-element super-blocks, sub-block j (32 elements) against x.

// One scale per 32 with a min (Q4_K, Q5_K) or without (IQ4_XS).
float q4_k_q5_k_sub_block(const unsigned char* blk, int j, bool five, const Q8Block& x, float acc) {
  const unsigned char* scales = blk + 4;  // both: d, dmin, then the 12 packed bytes
  const unsigned char* qs = blk + (five ? quant::q5_k::kQs : 16) + 32 * (j / 2);
  int sc, m;
  k4_scale_min(j, scales, sc, m);
  int32_t isum = 0;
  for (int l = 0; l < 32; ++l) {
    int q = (j % 2 == 0) ? (qs[l] & 15) : (qs[l] >> 4);
    if (five) q |= ((blk[quant::q5_k::kQh + l] >> j) & 1) << 4;
    isum += q * int32_t(x.q[l]);
  }
  acc = std::fma(static_cast<float>(sc * isum), f16_to_f32(blk) * x.d, acc);
  return std::fma(static_cast<float>(-(m * x.sum)), f16_to_f32(blk + 2) * x.d, acc);
}

float iq4_xs_sub_block(const unsigned char* blk, int j, const Q8Block& x, float acc) {
  const unsigned char* qs = blk + quant::iq4_xs::kQs + 16 * j;
  int32_t isum = 0;
  for (int l = 0; l < 32; ++l) isum += quant::kIq4nlValues[nibble(qs, l)] * int32_t(x.q[l]);
  return std::fma(static_cast<float>(quant::iq4_xs_scale(blk, j) * isum), f16_to_f32(blk) * x.d, acc);
}

// One scale per 16 elements: Q6_K, Q3_K, Q2_K. w[l]: the sub-block's integer weights.
int32_t scaled_halves(const int32_t (&w)[32], int scale_lo, int scale_hi, const Q8Block& x) {
  int32_t sums[2] = {0, 0};
  for (int l = 0; l < 32; ++l) sums[l / 16] += w[l] * int32_t(x.q[l]);
  return scale_lo * sums[0] + scale_hi * sums[1];
}

float q6_k_sub_block(const unsigned char* blk, int j, const Q8Block& x, float acc) {
  const unsigned char* ql = blk;
  const unsigned char* qh = blk + 128;
  const auto* sc = reinterpret_cast<const signed char*>(blk + 192);
  const int h = j / 4, k = j % 4;  // half, quarter
  int32_t w[32];
  for (int l = 0; l < 32; ++l) {
    const unsigned char lo = ql[64 * h + l + 32 * (k & 1)];
    const int nib = k < 2 ? (lo & 15) : (lo >> 4);
    w[l] = (nib | (((qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
  }
  const int32_t isum = scaled_halves(w, sc[8 * h + 2 * k], sc[8 * h + 2 * k + 1], x);
  return std::fma(static_cast<float>(isum), f16_to_f32(blk + 208) * x.d, acc);
}

// Element l of sub-block j's two low bits in a Q2_K / Q3_K qs array.
int two_bits(const unsigned char* qs, int j, int l) { return (qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3; }

float q3_k_sub_block(const unsigned char* blk, int j, const Q8Block& x, float acc) {
  int8_t sc[16];
  quant::q3_k_scales(blk + quant::q3_k::kScales, sc);
  int32_t w[32];
  for (int l = 0; l < 32; ++l) {
    const int high = (blk[quant::q3_k::kHmask + l] >> j) & 1;
    w[l] = two_bits(blk + quant::q3_k::kQs, j, l) - (high ? 0 : 4);
  }
  const int32_t isum = scaled_halves(w, sc[2 * j], sc[2 * j + 1], x);
  return std::fma(static_cast<float>(isum), f16_to_f32(blk + quant::q3_k::kD) * x.d, acc);
}

float q2_k_sub_block(const unsigned char* blk, int j, const Q8Block& x, float acc) {
  const unsigned char sc_lo = blk[quant::q2_k::kScales + 2 * j], sc_hi = blk[quant::q2_k::kScales + 2 * j + 1];
  int32_t w[32];
  for (int l = 0; l < 32; ++l) w[l] = two_bits(blk + quant::q2_k::kQs, j, l);
  const int32_t isum = scaled_halves(w, sc_lo & 15, sc_hi & 15, x);
  acc = std::fma(static_cast<float>(isum), f16_to_f32(blk + quant::q2_k::kD) * x.d, acc);
  const int32_t mins = (sc_lo >> 4) * half_sum(x, 0) + (sc_hi >> 4) * half_sum(x, 16);
  return std::fma(static_cast<float>(-mins), f16_to_f32(blk + quant::q2_k::kDmin) * x.d, acc);
}

float sub_block_dot(TensorType type, const unsigned char* blk, int j, const Q8Block& x, float acc) {
  switch (type) {
    case TensorType::Q4_K:
      return q4_k_q5_k_sub_block(blk, j, false, x, acc);
    case TensorType::Q5_K:
      return q4_k_q5_k_sub_block(blk, j, true, x, acc);
    case TensorType::IQ4_XS:
      return iq4_xs_sub_block(blk, j, x, acc);
    case TensorType::Q6_K:
      return q6_k_sub_block(blk, j, x, acc);
    case TensorType::Q3_K:
      return q3_k_sub_block(blk, j, x, acc);
    case TensorType::Q2_K:
      return q2_k_sub_block(blk, j, x, acc);
    default:
      return acc;
  }
}

}  // namespace

float dot_int8(TensorType type, const void* row, const Q8Block* x, int64_t n_blocks) {
  const auto* p = static_cast<const unsigned char*>(row);
  const auto block_bytes = static_cast<size_t>(tensor_type_info(type).block_bytes);
  float acc = 0;
  if (is_super_block_type(type)) {
    for (int64_t s = 0; s < n_blocks / 8; ++s) {
      const unsigned char* blk = p + static_cast<size_t>(s) * block_bytes;
      for (int j = 0; j < 8; ++j) acc = sub_block_dot(type, blk, j, x[8 * s + j], acc);
    }
    return acc;
  }
  for (int64_t b = 0; b < n_blocks; ++b) acc = block32_dot(type, p + static_cast<size_t>(b) * block_bytes, x[b], acc);
  return acc;
}

}  // namespace peregrine
