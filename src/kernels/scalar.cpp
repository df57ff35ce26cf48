#include "kernels/scalar.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace peregrine::scalar {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  peregrine::dequantize_row(type, src, dst, n);
}

void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                 std::span<std::byte>) {
  const auto* base = static_cast<const std::byte*>(rows);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * y_stride + r] = dot_int8(type, base + static_cast<size_t>(r) * row_bytes, x + t * x_stride, n_blocks);
    }
  }
}

size_t int8_scratch_bytes(TensorType, int64_t) { return 0; }

void tile_scores(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                 int64_t s_stride) {
  for (int64_t j = 0; j < n_queries; ++j) {
    for (int64_t i = 0; i < n_keys; ++i) scores[j * s_stride + i] = dot_f32(k + i * hd, q + j * hd, hd);
  }
}

float scale_max(float* s, float scale, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    s[i] *= scale;
    max = std::max(max, s[i]);
  }
  return max;
}

double sum_exp(const float* x, float m, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(std::exp(x[i] - m));
  return sum;
}

float exp_shifted(float* s, float m, int64_t n) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m);
    sum += s[i];
  }
  return sum;
}

void accumulate_rows(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < hd; ++c) y[c] += w[i] * rows[i][c];
  }
}

void scale(float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

}  // namespace peregrine::scalar
