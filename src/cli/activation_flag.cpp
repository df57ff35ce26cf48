#include "cli/activation_flag.h"

#include "util/error.h"

namespace peregrine::cli {

void ActivationFlag::add_to(ArgParser& p) {
  p.option("--activations", &name, "q8|f32",
           "how activations meet the weights: q8 = rounded once per matmul to 8-bit blocks for\n"
           "quantized weights (integer dot products) and, on CPUs with AVX512-BF16, to bf16 for\n"
           "F16/BF16 weights (bf16 dot products; F16 read as BF16); f32 = exact f32 for every type");
}

namespace {

Activations value_of(const std::string& name) {
  if (name == "q8") return Activations::Q8;
  if (name == "f32") return Activations::F32;
  throw UsageError("--activations '" + name + "': expected q8 or f32");
}

}  // namespace

Activations ActivationFlag::value() const { return value_of(name); }

}  // namespace peregrine::cli
