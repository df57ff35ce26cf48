#include "kv/kv_q8.h"

#include <cmath>

#include "format/tensor_type.h"
#include "kv/kv_type.h"

namespace peregrine {
namespace {

constexpr uint16_t kF16MaxFinite = 0x7BFF;  // 65504

// The smallest f16 >= d (d >= 0, finite), saturating at the largest finite f16.
uint16_t f16_at_least(float d) {
  uint16_t h = fp32_to_fp16(d);
  if (h >= 0x7C00) return kF16MaxFinite;        // overflowed to infinity
  if (fp16_to_fp32(h) < d) ++h;                 // positive f16 bits grow with the value
  return h > kF16MaxFinite ? kF16MaxFinite : h;
}

}  // namespace

void quantize_kv_q8_row(const float* x, int8_t* q, uint16_t* scales, int64_t n) {
  for (int64_t b = 0; b < n / kKvQ8Block; ++b) {
    const float* xb = x + b * kKvQ8Block;
    int8_t* qb = q + b * kKvQ8Block;
    float amax = 0.f;
    for (int64_t j = 0; j < kKvQ8Block; ++j) {
      if (std::isfinite(xb[j])) amax = std::fmax(amax, std::fabs(xb[j]));
    }
    const uint16_t h = f16_at_least(amax / 127.f);
    scales[b] = h;
    const float d = fp16_to_fp32(h);
    const float id = d > 0.f ? 1.f / d : 0.f;
    for (int64_t j = 0; j < kKvQ8Block; ++j) {
      const float r = std::isfinite(xb[j]) ? std::round(xb[j] * id) : 0.f;  // ties away from zero
      qb[j] = static_cast<int8_t>(r > 127.f ? 127.f : r < -127.f ? -127.f : r);
    }
  }
}

void dequantize_kv_q8_row(const int8_t* q, const uint16_t* scales, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kKvQ8Block; ++b) {
    const float d = fp16_to_fp32(scales[b]);
    for (int64_t j = 0; j < kKvQ8Block; ++j) dst[b * kKvQ8Block + j] = d * static_cast<float>(q[b * kKvQ8Block + j]);
  }
}

}  // namespace peregrine
