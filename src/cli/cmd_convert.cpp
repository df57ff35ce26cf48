// `peregrine convert`: llama2.c checkpoint, Hugging Face checkpoint folder (or any model peregrine
// reads) → GGUF with the tokenizer embedded and llama.cpp's metadata, so other GGUF engines run it too.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "cli/progress.h"
#include "format/convert.h"
#include "util/error.h"

namespace peregrine::cli {

int convert_command(const Args& args) {
  std::string input, output, type = "f32";
  std::optional<std::string> tokenizer;
  ArgParser p("convert", "Convert a Hugging Face checkpoint folder, a llama2.c checkpoint (with its tokenizer.bin)\n"
                         "or a GGUF file to GGUF, converting the weight matrices to --type. Norms and biases stay f32.");
  p.positional("IN", &input, "Hugging Face checkpoint folder, llama2.c .bin checkpoint or .gguf file, or a model name (see run --help)");
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin to embed (required for .bin)");
  p.option("-o,--output", &output, "OUT.gguf", "file to write");
  p.option("--type", &type, "TYPE",
           "weight type of every matrix (f32, f16, bf16, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0,\n"
           "iq4_nl, iq4_xs, q3_k) or a llama.cpp mix choosing per tensor (q2_k, q3_k_m, q4_k_m, q5_k_m)");
  if (!p.parse(args)) return 0;
  if (output.empty()) throw UsageError("-o OUT.gguf is required");
  const std::optional<QuantScheme> weight_type = parse_weight_type(type);

  ModelFile in = open_model_arg(input, tokenizer);
  if (!in.meta.contains("tokenizer.ggml.tokens"))
    throw UsageError(input + " has no vocabulary: pass its tokenizer.bin with --tokenizer");
  ProgressLine progress("writing " + output);
  write_gguf_from(in, output, weight_type, std::ref(progress));
  std::fprintf(stderr, "wrote %s (%s weights)\n", output.c_str(), type.c_str());
  return 0;
}

}  // namespace peregrine::cli
