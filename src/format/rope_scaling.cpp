#include "format/rope_scaling.h"

#include <cmath>
#include <numbers>

namespace peregrine {

std::vector<float> llama3_rope_factors(int64_t rope_dim, double freq_base, const Llama3RopeScaling& s) {
  const double low_freq_wavelen = s.original_context / s.low_freq_factor;
  const double high_freq_wavelen = s.original_context / s.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const double freq = std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_freq_wavelen) {
      f = 1.0;
    } else if (wavelen > low_freq_wavelen) {
      f = s.factor;
    } else {
      const double smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

}  // namespace peregrine
