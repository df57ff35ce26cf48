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

float dot_int8(TensorType type, const void* row, const Q8Block* x, int64_t n_blocks) {
  const auto* p = static_cast<const unsigned char*>(row);
  const size_t block_bytes = type == TensorType::Q8_0 ? 34 : 18;
  float acc = 0;
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
