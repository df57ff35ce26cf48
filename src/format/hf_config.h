#pragma once
// A Hugging Face config.json -> GGUF model metadata (general.architecture and the <arch>.* keys
// llama.cpp's converter writes), for the architectures peregrine runs:
//   LlamaForCausalLM, MistralForCausalLM -> "llama" (Q/K rows permuted for RoPE, see permute_qk;
//                                           Mistral's sliding_window -> llama.attention.sliding_window)
//   Qwen2ForCausalLM                     -> "qwen2" (q/k/v biases, NeoX RoPE: no permutation)
//   Qwen3ForCausalLM                     -> "qwen3" (q/k RMSNorm, NeoX RoPE)
//   Phi3ForCausalLM                      -> "phi3"  (fused qkv_proj and gate_up_proj, NeoX RoPE)
//   Gemma2ForCausalLM, Gemma3ForCausalLM -> "gemma2", "gemma3" (window, soft-caps, norms + 1)
// An unknown architecture, a missing or out-of-range field, or a feature peregrine does not
// implement (rope_scaling other than linear/llama3, MLP biases, another activation, Qwen's
// sliding window) is a FormatError "PATH/config.json: <problem>" naming the key.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "format/metadata.h"

namespace peregrine {

struct HfModelConfig {
  std::string hf_architecture;  // "LlamaForCausalLM", ...
  std::string arch;             // GGUF general.architecture: "llama" | "qwen2" | "qwen3" | "phi3"
  // HF llama checkpoints rotate (x[i], x[i + d/2]) (rotate_half); GGUF "llama" rotates adjacent
  // pairs, so llama.cpp's converter reorders the rows of each Q and K head: this flag.
  bool permute_qk = false;
  bool qkv_bias = false;  // q/k/v projections have biases (qwen2, llama with attention_bias)
  int64_t n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, dim = 0, ffn_dim = 0, vocab_size = 0;
  bool tied_embeddings = false;
  // Gemma's RMSNorm multiplies by (1 + w): llama.cpp's converter stores w + 1, and so does the loader.
  bool norm_plus_one = false;
  std::vector<float> rope_freq_factors;  // Llama 3.1 rope_scaling ("llama3"): rope_freqs.weight
  Metadata meta;                         // general.* and <arch>.* keys
};

// `name` becomes general.name.
HfModelConfig read_hf_config(const std::filesystem::path& config_json, const std::string& name);

}  // namespace peregrine
