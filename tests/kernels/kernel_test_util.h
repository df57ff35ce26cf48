#pragma once
// Shared inputs for the kernel tests: random (never all-zero) vectors and weight matrices of
// any tensor type, quantized with the format module's reference quantizer.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "format/model_file.h"
#include "format/tensor_type.h"

namespace peregrine::test {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

// A weight matrix {n_in, n_out} of `type` that owns its bytes; `view` points into them.
struct Weight {
  std::vector<std::byte> bytes;
  TensorView view;
};

inline Weight make_weight(TensorType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  Weight w;
  auto f = random_vec(static_cast<size_t>(n_in * n_out), seed);
  w.bytes.resize(tensor_bytes(type, n_in * n_out));
  const size_t row_bytes = tensor_bytes(type, n_in);
  for (int64_t r = 0; r < n_out; ++r)
    quantize_row(type, f.data() + r * n_in, w.bytes.data() + r * row_bytes, n_in);
  w.view.name = "w";
  w.view.type = type;
  w.view.shape = {n_in, n_out};
  w.view.data = w.bytes;
  return w;
}

inline constexpr TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                           TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K,
                                           TensorType::Q6_K};

}  // namespace peregrine::test
