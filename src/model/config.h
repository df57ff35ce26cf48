#pragma once
// The shape and hyper-parameters of a model, read from GGUF metadata (`<arch>.*` keys).
// Everything downstream (KV cache sizing, kernels, the forward pass, `peregrine info`) reads the
// model's shape from here and nowhere else.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/model_file.h"
#include "kernels/ops.h"
#include "kv/kv_type.h"

namespace peregrine {

enum class Arch { Llama, Qwen2 };

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;          // "llama" | "qwen2" (general.architecture)
  std::string name;               // general.name, if any
  int64_t n_vocab = 0;            // rows of token_embd.weight
  int64_t dim = 0;                // <arch>.embedding_length
  int64_t n_layers = 0;           // <arch>.block_count
  int64_t n_heads = 0;            // <arch>.attention.head_count
  int64_t n_kv_heads = 0;         // <arch>.attention.head_count_kv (default n_heads); MHA/GQA/MQA
  int64_t head_dim = 0;           // <arch>.attention.key_length, default dim / n_heads
  int64_t ffn_dim = 0;            // <arch>.feed_forward_length
  int64_t context_length = 0;     // <arch>.context_length
  int64_t rope_dim = 0;           // <arch>.rope.dimension_count, default head_dim
  float rms_eps = 1e-5f;          // <arch>.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.f; // <arch>.rope.freq_base
  float rope_freq_scale = 1.f;    // 1 / <arch>.rope.scaling.factor for linear scaling
  RopeStyle rope_style = RopeStyle::Adjacent;
  std::vector<float> rope_freq_factors;  // rope_freqs.weight (Llama 3.1+ scaling), else empty
  bool tied_output = false;       // no output.weight: the head reuses token_embd.weight
  bool qkv_bias = false;          // attn_{q,k,v}.bias present (qwen2)

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t gqa_group() const { return n_heads / n_kv_heads; }  // query heads per KV head
  KvShape kv_shape() const { return {n_layers, n_kv_heads, head_dim}; }
  // KV cache bytes per token: 2 (K and V) * layers * kv_heads * head_dim * bytes per element.
  double kv_bytes_per_token(double bytes_per_elem) const {
    return 2.0 * static_cast<double>(n_layers * n_kv_heads * head_dim) * bytes_per_elem;
  }

  // Reads and validates the config. Throws FormatError("PATH: ...") for a missing/inconsistent
  // key or tensor shape, and for an unsupported architecture, listing the supported ones.
  static ModelConfig from_model_file(const ModelFile& file);
};

std::span<const std::string_view> supported_architectures();  // {"llama", "qwen2"}

}  // namespace peregrine
