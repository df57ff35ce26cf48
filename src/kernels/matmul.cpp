#include "kernels/matmul.h"

#include <cstdint>
#include <stdexcept>

namespace peregrine {

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> row_scratch) {
  const int64_t n_in = w.row_length();
  const int64_t n_out = w.n_rows();
  if (n_tokens < 0 || static_cast<int64_t>(x.size()) != n_tokens * n_in ||
      static_cast<int64_t>(y.size()) != n_tokens * n_out || static_cast<int64_t>(row_scratch.size()) < n_in) {
    throw std::invalid_argument("matmul: sizes do not match weight '" + w.name + "'");
  }
  // F32 rows are used in place when the mapping is aligned (it is for GGUF and llama2.c files).
  const bool direct = w.type == TensorType::F32 &&
                      reinterpret_cast<std::uintptr_t>(w.data.data()) % alignof(float) == 0;
  for (int64_t r = 0; r < n_out; ++r) {
    const float* row;
    if (direct) {
      row = reinterpret_cast<const float*>(w.row(r));
    } else {
      dequantize_row(w.type, w.row(r), row_scratch.data(), n_in);
      row = row_scratch.data();
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[static_cast<size_t>(t * n_out + r)] = dot(row, x.data() + t * n_in, n_in);
    }
  }
}

}  // namespace peregrine
