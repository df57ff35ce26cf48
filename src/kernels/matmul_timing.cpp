#include "kernels/matmul_timing.h"

namespace peregrine {

void naive_matmul(const float* w, const float* x, float* y, int64_t n_tokens, int64_t n_out, int64_t n_in) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      float sum = 0;
      for (int64_t k = 0; k < n_in; ++k) sum += x[t * n_in + k] * w[o * n_in + k];
      y[t * n_out + o] = sum;
    }
  }
}

std::vector<float> lcg_floats(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
  }
  return v;
}

}  // namespace peregrine
