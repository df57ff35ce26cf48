#pragma once
// Weight-times-activations products. Every output element is one dot product reduced in a fixed
// order that depends only on the row length, never on how many tokens share the call, so a
// sequence's results are bit-identical whatever else is in the batch.
#include <cstdint>
#include <span>

#include "format/model_file.h"

namespace peregrine {

// a, b: [n]. Eight interleaved partial sums (lane i takes elements i, i+8, ...), combined in a
// fixed tree, then the ragged tail in order.
float dot(const float* a, const float* b, int64_t n);

// y = x W^T for a batch of tokens.
// w: weight of GGUF shape {n_in, n_out} (n_out rows of n_in), any supported TensorType
// x: [n_tokens][n_in]
// y: [n_tokens][n_out]
// row_scratch: [n_in] floats, holds one dequantized weight row
// Each weight row is dequantized once per call and dotted with every token, so a batch reads the
// weights once. Throws std::invalid_argument on mismatched sizes (a programming error).
void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> row_scratch);

}  // namespace peregrine
