// `peregrine info`: what a model file holds, and what it costs to run.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "kv/kv_type.h"
#include "model/config.h"
#include "model/weight_census.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::cli {
namespace {

const char* gating_name(MoeGating g) {
  switch (g) {
    case MoeGating::Softmax: return "softmax over all experts";
    case MoeGating::Sigmoid: return "sigmoid";
    case MoeGating::SoftmaxTopK: return "softmax over the selected";
  }
  return "?";
}

// Experts, the routing rule, and what a token actually uses of the weights.
void print_experts(const ModelConfig& c, const WeightCensus& w) {
  const MoeConfig& m = c.moe;
  std::printf("experts:          %lld per layer, %lld per token, expert ffn dim %lld", static_cast<long long>(m.n_experts()),
              static_cast<long long>(m.n_used()), static_cast<long long>(m.expert_ffn_dim));
  if (m.shared_ffn_dim > 0) std::printf("; shared expert ffn dim %lld (sigmoid gate)", static_cast<long long>(m.shared_ffn_dim));
  std::printf("\nrouting:          %s, top %lld (ties: lowest index), weights %s%s\n", gating_name(m.routing.gating),
              static_cast<long long>(m.n_used()), m.routing.normalize ? "renormalized to sum 1" : "not renormalized",
              m.routing.scale != 1.f ? (", scaled by " + std::to_string(m.routing.scale)).c_str() : "");
  std::printf("active/token:     %.2f M of %.2f M parameters (%.1f %%), %.2f MiB of %.2f MiB of weights\n",
              w.active_params() / 1e6, static_cast<double>(w.params()) / 1e6,
              100.0 * w.active_params() / static_cast<double>(w.params()), w.active_bytes() / 1048576.0,
              static_cast<double>(w.bytes()) / 1048576.0);
  std::printf("experts' share:   %.2f M parameters, %.2f MiB (%.2f MiB per expert over all layers)\n",
              static_cast<double>(w.expert_params) / 1e6, static_cast<double>(w.expert_bytes) / 1048576.0,
              static_cast<double>(w.expert_bytes) / static_cast<double>(m.n_experts()) / 1048576.0);
}

// Sliding-window attention: the window, which layers use it, and Gemma's soft-caps.
void print_window(const ModelConfig& c) {
  int64_t sliding = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) sliding += c.layer_window(l) > 0 ? 1 : 0;
  std::printf("sliding window:   %lld positions on %lld of %lld layers%s\n", static_cast<long long>(c.sliding_window),
              static_cast<long long>(sliding), static_cast<long long>(c.n_layers),
              c.rope_freq_base_swa > 0.f ? " (RoPE base 1e4 there)" : "");
  if (c.attn_softcap > 0.f || c.final_softcap > 0.f) {
    std::printf("soft-capping:     attention logits %g, final logits %g\n", c.attn_softcap, c.final_softcap);
  }
}

}  // namespace

int info_command(const Args& args) {
  std::optional<std::string> model, tokenizer, weight_type;
  ArgParser p("info", "Describe a model: architecture, parameter count, tensor types, context\n"
                      "length, attention heads, and the KV cache bytes per token (2*L*h_kv*d_h*b); for a\n"
                      "mixture of experts also the experts, the routing rule, and the parameters and bytes\n"
                      "one token actually uses.");
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
  if (c.is_moe()) print_experts(c, weight_census(mf, c));
  std::printf("attention:        %s, %lld query heads, %lld KV heads, head dim %lld%s\n", attention,
              static_cast<long long>(c.n_heads), static_cast<long long>(c.n_kv_heads),
              static_cast<long long>(c.head_dim), c.qk_norm ? ", q/k RMSNorm" : "");
  std::printf("context length:   %lld\n", static_cast<long long>(c.context_length));
  if (c.sliding_window > 0) print_window(c);
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
  std::printf("                  ");  // the quantized cache types (--kv-type), scales included
  for (KvType t : {KvType::Q8_0, KvType::FP8_E4M3, KvType::Q4_0}) {
    if (kv_type_supports_head_dim(t, c.head_dim)) {
      std::printf("%.0f at %s; ", c.kv_bytes_per_token(kv_bytes_per_value(t, c.head_dim)), kv_type_name(t).data());
    }
  }
  std::printf("\n");
  if (c.kv_window() > 0) {  // every layer windowed: the blocks behind the window are given back
    std::printf("KV in the window: %.2f MiB per sequence at f16 (%lld positions)\n",
                c.kv_bytes_per_token(2) * static_cast<double>(std::min(c.kv_window(), c.context_length)) / 1048576.0,
                static_cast<long long>(std::min(c.kv_window(), c.context_length)));
  }
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
