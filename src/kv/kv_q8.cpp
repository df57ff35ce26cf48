#include "kv/kv_q8.h"

#include <cmath>

#include "format/tensor_type.h"
#include "kv/kv_scale.h"
#include "kv/kv_type.h"

namespace peregrine {

void quantize_kv_q8_row(const float* x, int8_t* q, uint16_t* scales, int64_t n, int64_t group) {
  for (int64_t b = 0; b < n / group; ++b) {
    const float* xb = x + b * group;
    int8_t* qb = q + b * group;
    float amax = 0.f;
    for (int64_t j = 0; j < group; ++j) {
      if (std::isfinite(xb[j])) amax = std::fmax(amax, std::fabs(xb[j]));
    }
    const uint16_t h = f16_at_least(amax / 127.f);
    scales[b] = h;
    const float d = fp16_to_fp32(h);
    const float id = d > 0.f ? 1.f / d : 0.f;
    for (int64_t j = 0; j < group; ++j) {
      const float r = std::isfinite(xb[j]) ? std::round(xb[j] * id) : 0.f;  // ties away from zero
      qb[j] = static_cast<int8_t>(r > 127.f ? 127.f : r < -127.f ? -127.f : r);
    }
  }
}

void dequantize_kv_q8_row(const int8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group) {
  for (int64_t b = 0; b < n / group; ++b) {
    const float d = fp16_to_fp32(scales[b]);
    for (int64_t j = 0; j < group; ++j) dst[b * group + j] = d * static_cast<float>(q[b * group + j]);
  }
}

}  // namespace peregrine
