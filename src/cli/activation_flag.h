#pragma once
// --activations q8|f32: how activations meet the weights, one flag for every command that computes
// (run, serve, bench, bench-serve, perplexity; BackendFlags adds it).
//   q8  (default) quantized weights: activations rounded to 8-bit blocks, integer dot products;
//       F16/BF16 weights on a CPU with AVX512-BF16: activations rounded to bf16, bf16 dot products
//       (F16 weights converted to BF16 at load). Results within a stated tolerance of f32
//       (docs/design/kernels.md), invariant to batch and threads.
//   f32 every weight dequantized and dotted with f32 activations: the exact path.
#include <string>

#include "cli/args.h"
#include "kernels/matmul.h"

namespace peregrine::cli {

struct ActivationFlag {
  std::string name = "q8";

  void add_to(ArgParser& parser);
  // The mode named; throws UsageError for anything but q8 or f32.
  Activations value() const;
};

}  // namespace peregrine::cli
