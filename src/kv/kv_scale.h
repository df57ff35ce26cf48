#pragma once
// The scale rule the quantized KV types share: a block's scale is stored as the smallest f16 at
// least as large as the exact one, so quantizing against the stored scale never clips.
#include <cstdint>

#include "format/tensor_type.h"

namespace peregrine {

// The smallest f16 >= d (d >= 0, finite), saturating at the largest finite f16 (65504).
inline uint16_t f16_at_least(float d) {
  constexpr uint16_t kF16MaxFinite = 0x7BFF;
  uint16_t h = fp32_to_fp16(d);
  if (h >= 0x7C00) return kF16MaxFinite;  // overflowed to infinity
  if (fp16_to_fp32(h) < d) ++h;           // positive f16 bits grow with the value
  return h > kF16MaxFinite ? kF16MaxFinite : h;
}

}  // namespace peregrine
