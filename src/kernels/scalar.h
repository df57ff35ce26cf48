#pragma once
// The plain C++ kernels: the "scalar" path of kernel_table.h, which runs on any CPU and is the
// reference the vector paths are tested against. Internal to kernels/: use matmul.h/attention.h.
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/tensor_type.h"
#include "kernels/int8_dot.h"

namespace peregrine::scalar {

// a, b: [n]. Eight interleaved partial sums (lane i takes elements i, i+8, ...), combined in a
// fixed tree, then the ragged tail in order.
float dot_f32(const float* a, const float* b, int64_t n);

// format's dequantize_row. dst: [n]
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// dot_int8 of every (row, token) pair; see KernelTable::matmul_int8 (scratch unused).
void matmul_int8(TensorType type, const void* rows, size_t row_bytes, int64_t n_rows, const Q8Block* x,
                 int64_t x_stride, int64_t n_tokens, int64_t n_blocks, float* y, int64_t y_stride,
                 std::span<std::byte> scratch);
size_t int8_scratch_bytes(TensorType type, int64_t n_blocks);

// Attention tiles (KernelTable): scores by dot_f32; exp summed in order; accumulate as n axpys.
void tile_scores(const float* k, int64_t n_keys, const float* q, int64_t n_queries, int64_t hd, float* scores,
                 int64_t s_stride);
float scale_max(float* s, float scale, int64_t n);
double sum_exp(const float* x, float m, int64_t n);
float exp_shifted(float* s, float m, int64_t n);
void accumulate_rows(const float* w, const float* const* rows, int64_t n, float* y, int64_t hd);
void scale(float s, float* y, int64_t n);

}  // namespace peregrine::scalar
