// `peregrine info`: what a model file holds, and what it costs to run.
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::cli {

int info_command(const Args& args) {
  std::optional<std::string> model, tokenizer, weight_type;
  ArgParser p("info", "Describe a model: architecture, parameter count, tensor types, context\n"
                      "length, attention heads, and the KV cache bytes per token (2*L*h_kv*d_h*b).");
  p.positional("MODEL", &model, kModelHelp);
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--type", &weight_type, "TYPE", kLoadTypeHelp);
  if (!p.parse(args)) return 0;

  ModelFile mf = open_model_arg(model, tokenizer, parse_weight_type(weight_type));
  ModelConfig c = ModelConfig::from_model_file(mf);

  int64_t params = 0;
  uint64_t weight_bytes = 0;
  std::map<std::string, int64_t> type_counts;
  for (const auto& t : mf.tensors) {
    params += t.n_elements();
    weight_bytes += t.data.size();
    ++type_counts[std::string(tensor_type_name(t.type))];
  }
  std::string types;
  for (const auto& [name, count] : type_counts)
    types += (types.empty() ? "" : ", ") + name + " x" + std::to_string(count);

  const char* attention = c.n_kv_heads == c.n_heads ? "MHA" : c.n_kv_heads == 1 ? "MQA" : "GQA";
  const std::string kind = mf.gguf_version ? "GGUF v" + std::to_string(mf.gguf_version)
                           : std::filesystem::is_directory(mf.path) ? "Hugging Face checkpoint"
                                                                     : "llama2.c checkpoint";
  std::printf("file:             %s (%s)\n", mf.path.c_str(), kind.c_str());
  std::printf("architecture:     %s%s%s\n", c.arch_name.c_str(), c.name.empty() ? "" : "  name: ",
              c.name.c_str());
  std::printf("parameters:       %lld (%.2f M)\n", static_cast<long long>(params), params / 1e6);
  std::printf("weight bytes:     %llu (%.2f MiB)\n", static_cast<unsigned long long>(weight_bytes),
              weight_bytes / 1048576.0);
  std::printf("tensor types:     %s\n", types.c_str());
  std::printf("layers:           %lld\n", static_cast<long long>(c.n_layers));
  std::printf("embedding dim:    %lld   ffn dim: %lld   vocab: %lld\n", static_cast<long long>(c.dim),
              static_cast<long long>(c.ffn_dim), static_cast<long long>(c.n_vocab));
  std::printf("attention:        %s, %lld query heads, %lld KV heads, head dim %lld\n", attention,
              static_cast<long long>(c.n_heads), static_cast<long long>(c.n_kv_heads),
              static_cast<long long>(c.head_dim));
  std::printf("context length:   %lld\n", static_cast<long long>(c.context_length));
  std::printf("rope:             %s pairs, freq base %g%s\n",
              c.rope_style == RopeStyle::Adjacent ? "adjacent" : "neox (half-split)",
              c.rope_freq_base, c.rope_freq_factors.empty() ? "" : ", with rope_freqs factors");
  std::printf("output head:      %s%s\n", c.tied_output ? "tied to token embedding" : "separate",
              c.qkv_bias ? "   (q/k/v bias)" : "");
  std::printf("KV bytes/token:   %.0f at f16 (2 x %lld layers x %lld KV heads x %lld dims x 2 B); "
              "%.0f at f32\n",
              c.kv_bytes_per_token(2), static_cast<long long>(c.n_layers),
              static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.head_dim),
              c.kv_bytes_per_token(4));
  std::printf("KV full context:  %.2f MiB per sequence at f16\n",
              c.kv_bytes_per_token(2) * static_cast<double>(c.context_length) / 1048576.0);
  try {
    Tokenizer tok = Tokenizer::from_metadata(mf.meta, mf.path);
    std::printf("tokenizer:        %s (%s), %d tokens, BOS %d, EOS %d\n",
                std::string(tok.model_kind()).c_str(), std::string(tok.pre_tokenizer()).c_str(),
                tok.n_vocab(), tok.bos(), tok.eos());
  } catch (const std::exception& e) {
    std::printf("tokenizer:        none usable (%s)\n", e.what());
  }
  return 0;
}

}  // namespace peregrine::cli
