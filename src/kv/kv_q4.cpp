#include "kv/kv_q4.h"

#include <cmath>

#include "format/tensor_type.h"
#include "kv/kv_scale.h"

namespace peregrine {

void quantize_kv_q4_row(const float* x, uint8_t* q, uint16_t* scales, int64_t n, int64_t group) {
  const int64_t half = group / 2;
  for (int64_t b = 0; b < n / group; ++b) {
    const float* xb = x + b * group;
    float m = 0.f;  // the value of largest magnitude
    for (int64_t j = 0; j < group; ++j) {
      if (std::isfinite(xb[j]) && std::fabs(xb[j]) > std::fabs(m)) m = xb[j];
    }
    // d = m / -8 with its magnitude rounded up: f16 bits are sign | magnitude.
    const uint16_t h = static_cast<uint16_t>(f16_at_least(std::fabs(m) / 8.f) | (m > 0.f ? 0x8000 : 0));
    scales[b] = h;
    const float d = fp16_to_fp32(h);
    const float id = d != 0.f ? 1.f / d : 0.f;
    auto nibble = [&](float v) {
      const float r = std::isfinite(v) ? std::round(v * id) : 0.f;  // ties away from zero
      return static_cast<int>(r > 7.f ? 7.f : r < -8.f ? -8.f : r) + 8;
    };
    for (int64_t j = 0; j < half; ++j) {
      q[b * half + j] = static_cast<uint8_t>(nibble(xb[j]) | (nibble(xb[j + half]) << 4));
    }
  }
}

void dequantize_kv_q4_row(const uint8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group) {
  const int64_t half = group / 2;
  for (int64_t b = 0; b < n / group; ++b) {
    const float d = fp16_to_fp32(scales[b]);
    for (int64_t j = 0; j < half; ++j) {
      const uint8_t byte = q[b * half + j];
      dst[b * group + j] = d * static_cast<float>((byte & 0xF) - 8);
      dst[b * group + j + half] = d * static_cast<float>((byte >> 4) - 8);
    }
  }
}

}  // namespace peregrine
