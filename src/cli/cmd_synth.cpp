// `peregrine synth`: a random-weight model with a true architecture shape and a valid
// tokenizer, for tests and benchmarks when real weights cannot be downloaded.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "synth/synthetic.h"
#include "util/error.h"

namespace peregrine::cli {

int synth_command(const Args& args) {
  std::string preset, output, type = "f16";
  uint64_t seed = 0;
  std::string presets;
  for (auto name : synthetic_preset_names()) presets += (presets.empty() ? "" : ", ") + std::string(name);
  ArgParser p("synth", "Write a random-weight GGUF model of a known shape with a valid tokenizer.\n"
                       "Presets: " + presets);
  p.option("--preset", &preset, "NAME", "model shape");
  p.option("--type", &type, "TYPE",
           "weight type of every matrix (f32, f16, bf16, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0,\n"
           "iq4_nl, iq4_xs, q3_k) or a llama.cpp mix choosing per tensor (q2_k, q3_k_m, q4_k_m, q5_k_m)");
  p.option("--seed", &seed, "S", "random seed (same seed, same file)");
  p.option("-o,--output", &output, "FILE.gguf", "file to write");
  int64_t context = 0;
  p.option("--context", &context, "N", "context length written to the file instead of the preset's (e.g. to\n"
                                       "benchmark a small shape at a long context)", 1, int64_t(1) << 24);
  bool header_only = false;
  p.flag("--header-only", &header_only,
         "write the metadata and tensor table with the data left as a hole (a sparse file that reads as\n"
         "zeros): for shapes too large to generate, for `info` and `kv-calc` only");
  if (!p.parse(args)) return 0;
  if (preset.empty()) throw UsageError("--preset is required (one of: " + presets + ")");
  if (output.empty()) throw UsageError("-o FILE.gguf is required");
  std::optional<SyntheticSpec> spec = synthetic_preset(preset);
  if (!spec) throw UsageError("unknown preset '" + preset + "' (one of: " + presets + ")");
  if (context > 0) spec->context_length = context;
  const std::optional<QuantScheme> weight_type = parse_quant_scheme(type);
  if (!weight_type) throw UsageError("unknown --type '" + type + "' (choose " + quant_scheme_names() + ")");

  if (header_only) {
    write_synthetic_gguf_header_only(*spec, *weight_type, output);
    std::fprintf(stderr, "wrote %s (%s, %s, header only: every weight reads as zero)\n", output.c_str(),
                 preset.c_str(), type.c_str());
    return 0;
  }
  ProgressLine progress("synth " + preset);
  write_synthetic_gguf(*spec, *weight_type, seed, output, std::ref(progress));
  std::fprintf(stderr, "wrote %s (%s, %s weights, seed %llu)\n", output.c_str(), preset.c_str(),
               type.c_str(), static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace peregrine::cli
