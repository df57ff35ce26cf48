// Portable reference of the integer dot products (int8_dot.h); the AVX2 kernel
// (simd_avx2_int8.cpp) reproduces these bits.
#include "kernels/int8_dot.h"

#include <cmath>
#include <cstring>

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

// Q4_K's packed 6-bit scale and min of sub-block j (0..7), as ggml packs them.
void q4_k_scale_min(const unsigned char* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// One 256-element super-block of Q4_K against its 8 activation blocks x[0..7], into acc.
float q4_k_super_block(const unsigned char* blk, const Q8Block* x, float acc) {
  const float d = f16_to_f32(blk), dmin = f16_to_f32(blk + 2);
  const unsigned char* scales = blk + 4;
  const unsigned char* qs = blk + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    q4_k_scale_min(scales, j, sc, m);
    const unsigned char* q = qs + 32 * (j / 2);
    int32_t isum = 0;
    for (int l = 0; l < 32; ++l) isum += ((j % 2 == 0) ? (q[l] & 15) : (q[l] >> 4)) * int32_t(x[j].q[l]);
    acc = std::fma(static_cast<float>(sc * isum), d * x[j].d, acc);
    acc = std::fma(static_cast<float>(-(m * x[j].sum)), dmin * x[j].d, acc);
  }
  return acc;
}

// One 256-element super-block of Q6_K against its 8 activation blocks, into acc.
float q6_k_super_block(const unsigned char* blk, const Q8Block* x, float acc) {
  const unsigned char* ql = blk;
  const unsigned char* qh = blk + 128;
  const auto* sc = reinterpret_cast<const signed char*>(blk + 192);
  const float d = f16_to_f32(blk + 208);
  for (int j = 0; j < 8; ++j) {
    const int h = j / 4, k = j % 4;  // half, quarter
    int32_t half_sums[2] = {0, 0};
    for (int l = 0; l < 32; ++l) {
      const unsigned char lo = ql[64 * h + l + 32 * (k & 1)];
      const int nib = k < 2 ? (lo & 15) : (lo >> 4);
      const int q = nib | (((qh[32 * h + l] >> (2 * k)) & 3) << 4);
      half_sums[l / 16] += (q - 32) * int32_t(x[j].q[l]);
    }
    const int32_t isum = sc[8 * h + 2 * k] * half_sums[0] + sc[8 * h + 2 * k + 1] * half_sums[1];
    acc = std::fma(static_cast<float>(isum), d * x[j].d, acc);
  }
  return acc;
}

}  // namespace

float dot_int8(TensorType type, const void* row, const Q8Block* x, int64_t n_blocks) {
  const auto* p = static_cast<const unsigned char*>(row);
  float acc = 0;
  if (type == TensorType::Q4_K || type == TensorType::Q6_K) {
    const size_t super_bytes = type == TensorType::Q4_K ? 144 : 210;
    for (int64_t s = 0; s < n_blocks / 8; ++s) {
      const unsigned char* blk = p + static_cast<size_t>(s) * super_bytes;
      acc = type == TensorType::Q4_K ? q4_k_super_block(blk, x + 8 * s, acc) : q6_k_super_block(blk, x + 8 * s, acc);
    }
    return acc;
  }
  const size_t block_bytes = type == TensorType::Q8_0 ? 34 : 18;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const unsigned char* blk = p + static_cast<size_t>(b) * block_bytes;
    int32_t isum = 0;
    if (type == TensorType::Q8_0) {
      for (int j = 0; j < 32; ++j) isum += int32_t(static_cast<int8_t>(blk[2 + j])) * x[b].q[j];
    } else {  // Q4_0: element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16]
      for (int j = 0; j < 16; ++j) {
        isum += ((blk[2 + j] & 15) - 8) * int32_t(x[b].q[j]);
        isum += ((blk[2 + j] >> 4) - 8) * int32_t(x[b].q[j + 16]);
      }
    }
    acc = std::fma(static_cast<float>(isum), f16_to_f32(blk) * x[b].d, acc);
  }
  return acc;
}

}  // namespace peregrine
