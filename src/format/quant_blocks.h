#pragma once
// Block layouts of the quantized types beyond Q8_0/Q4_0/Q4_K/Q6_K, as ggml defines them (byte
// offsets within one block), the small decoders every reader of them shares (format's
// dequantizers, the integer dot products' scalar reference and SIMD kernels), and the per-type
// row converters tensor_type.cpp dispatches to (quant_blocks_32.cpp, quant_blocks_k.cpp).
// All multi-byte fields are little-endian and unaligned: read them with memcpy.
#include <cstdint>
#include <cstring>

#include "format/tensor_type.h"

namespace peregrine::quant {

// ---- Shared scalar helpers.
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline float load_half(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- 32-element blocks. The 16 nibble bytes qs hold element j (< 16) in the low nibble of
// qs[j] and element j + 16 in the high nibble (as Q4_0). Q5_0/Q5_1's qh is a 32-bit word whose
// bit j is element j's fifth bit.
namespace q4_1 {
constexpr int kBytes = 20, kD = 0, kM = 2, kQs = 4;
}
namespace q5_0 {
constexpr int kBytes = 22, kD = 0, kQh = 2, kQs = 6;
}
namespace q5_1 {
constexpr int kBytes = 24, kD = 0, kM = 2, kQh = 4, kQs = 8;
}
namespace iq4_nl {
constexpr int kBytes = 18, kD = 0, kQs = 2;
}
// The 16 values an IQ4_NL / IQ4_XS index selects (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// ---- 256-element super-blocks, eight sub-blocks j of 32 elements.
// Q2_K: sub-block j = quarter k = j % 4 of half h = j / 4; element l (< 32) is bits 2k..2k+1 of
// qs[32h + l]; its first 16 elements take scales[2j], the last 16 scales[2j + 1] (scale in the
// low nibble, min in the high nibble).
namespace q2_k {
constexpr int kBytes = 84, kScales = 0, kQs = 16, kD = 80, kDmin = 82;
}
// Q3_K: element l of sub-block j (half h = j / 4, quarter k = j % 4): low bits 2k..2k+1 of
// qs[32h + l], third bit = bit j of hmask[l] (set: q, clear: q - 4). Sixteen 6-bit scales (one
// per 16 elements, stored + 32) packed in 12 bytes: see q3_k_scales.
namespace q3_k {
constexpr int kBytes = 110, kHmask = 0, kQs = 32, kScales = 96, kD = 108;
}
// Q5_K: as Q4_K (sub-blocks 2i and 2i+1 in the low and high nibbles of qs[32i..32i+31], 6-bit
// scales and mins as get_scale_min_k4) plus a fifth bit: bit j of qh[l] for element l of sub-block j.
namespace q5_k {
constexpr int kBytes = 176, kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48;
}
// IQ4_XS: sub-block j's 16 bytes at qs + 16j (nibbles as Q4_0); its 6-bit scale (stored + 32) has
// its low 4 bits in nibble j % 2 of scales_l[j / 2] and its high 2 bits at bits 2j of scales_h.
namespace iq4_xs {
constexpr int kBytes = 136, kD = 0, kScalesH = 2, kScalesL = 4, kQs = 8;
}

// Q3_K's sixteen scales (minus 32: -32..31) from the 12 packed bytes at p: scale i keeps its low
// 4 bits in nibble i / 8 of byte i % 8 and its high 2 bits at bits 2 (i / 4) of byte 8 + i % 4.
inline void q3_k_scales(const uint8_t* p, int8_t (&out)[16]) {
  for (int i = 0; i < 16; ++i) {
    const int lo = (p[i % 8] >> (4 * (i / 8))) & 0xF;
    const int hi = (p[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block from its 12 packed
// bytes q (ggml's get_scale_min_k4).
inline void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// IQ4_XS sub-block j's scale minus 32 (-32..31). blk: the super-block.
inline int iq4_xs_scale(const uint8_t* blk, int j) {
  const int lo = (blk[iq4_xs::kScalesL + j / 2] >> (4 * (j % 2))) & 0xF;
  const int hi = (load_u16(blk + iq4_xs::kScalesH) >> (2 * j)) & 3;
  return (lo | (hi << 4)) - 32;
}

// ---- Row converters (nb blocks of the type; src/dst as tensor_type.h's dequantize_row/quantize_row).
void dequantize_q4_1(const uint8_t* src, float* dst, int64_t nb);
void dequantize_q5_0(const uint8_t* src, float* dst, int64_t nb);
void dequantize_q5_1(const uint8_t* src, float* dst, int64_t nb);
void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t nb);
void quantize_q4_1(const float* src, uint8_t* dst, int64_t nb);
void quantize_q5_0(const float* src, uint8_t* dst, int64_t nb);
void quantize_q5_1(const float* src, uint8_t* dst, int64_t nb);
void quantize_iq4_nl(const float* src, uint8_t* dst, int64_t nb);

void dequantize_q2_k(const uint8_t* src, float* dst, int64_t nb);
void dequantize_q3_k(const uint8_t* src, float* dst, int64_t nb);
void dequantize_q5_k(const uint8_t* src, float* dst, int64_t nb);
void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t nb);
void quantize_q2_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_q3_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_q5_k(const float* src, uint8_t* dst, int64_t nb);
void quantize_iq4_xs(const float* src, uint8_t* dst, int64_t nb);

// Q4_K / Q5_K's fit of 256 values: per sub-block an affine fit over [min(0, lo), hi] with `levels`
// steps, the 8 scales and 8 mins to 6 bits against the largest, written as d, dmin (fp16) and the
// 12 packed bytes; L[0..255] = each element re-quantized with the rounded scales (0..levels).
void quantize_k_affine(const float* src, int levels, uint8_t* d_at, uint8_t* dmin_at, uint8_t* scales, uint8_t* L);

// Nearest integer, ties away from zero (as ggml's nearest_int for the values it meets).
int nearest_int(float x);

// IQ4: the index of the kIq4nlValues entry nearest to x (x in value units).
int iq4_nearest_index(float x);
// A scale d for 32 values x[0..31] with x ~ d * kIq4nlValues[idx]: tries the scales that map the
// element of largest magnitude onto each end of the value range and a few between, refits d by
// least squares on each choice of indices, and keeps the smallest squared error; returns d and
// writes idx[0..31] (d = 0 for an all-zero block).
float iq4_fit_block(const float* x, uint8_t* idx);

}  // namespace peregrine::quant
