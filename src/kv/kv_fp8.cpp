#include "kv/kv_fp8.h"

#include <cmath>

#include "format/tensor_type.h"
#include "kv/kv_scale.h"

namespace peregrine {
namespace {

constexpr float kE4M3Max = 448.f;
constexpr uint8_t kE4M3MaxCode = 0x7E;  // 1.75 * 2^8

// The E4M3 code of |a| (0 <= a <= 448), rounded to nearest, ties to even. With e = floor(log2 a)
// (at least -6, E4M3's smallest normal exponent), the code is (e + 7) * 8 + the 3 mantissa bits;
// a mantissa that rounds up to 8 carries into the exponent, and subnormals (e = -6, exponent
// field 0 or 1) need no case of their own.
uint8_t e4m3_magnitude_code(float a) {
  if (!(a > 0.f)) return 0;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1
  const int exp = std::max(e - 1, -6);
  const float steps = std::nearbyint(std::ldexp(a, 3 - exp));  // a in units of 2^(exp - 3)
  const int code = (exp + 6) * 8 + static_cast<int>(steps);   // steps in [8, 16] (normal), [0, 8] (exp -6)
  return static_cast<uint8_t>(code > kE4M3MaxCode ? kE4M3MaxCode : code);
}

}  // namespace

float e4m3_to_f32(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (code & 0x80) != 0 ? -mag : mag;
}

void quantize_kv_fp8_row(const float* x, uint8_t* codes, uint16_t* scale, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) amax = std::fmax(amax, std::fabs(x[i]));
  }
  *scale = f16_at_least(amax / kE4M3Max);
  const float d = fp16_to_fp32(*scale);
  const float id = d > 0.f ? 1.f / d : 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      codes[i] = 0;
      continue;
    }
    const uint8_t mag = e4m3_magnitude_code(std::fabs(x[i]) * id);
    codes[i] = static_cast<uint8_t>(mag | (std::signbit(x[i]) && mag != 0 ? 0x80 : 0));
  }
}

void dequantize_kv_fp8_row(const uint8_t* codes, uint16_t scale, float* dst, int64_t n) {
  const float d = fp16_to_fp32(scale);
  for (int64_t i = 0; i < n; ++i) dst[i] = d * e4m3_to_f32(codes[i]);
}

}  // namespace peregrine
