#pragma once
// The shape and hyper-parameters of a model, read from GGUF metadata (`<arch>.*` keys).
// Everything downstream (KV cache sizing, kernels, the forward pass, `peregrine info`) reads the
// model's shape from here and nowhere else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/moe_routing.h"
#include "format/model_file.h"
#include "kernels/ops.h"
#include "kv/kv_type.h"

namespace peregrine {

enum class Arch { Llama, Qwen2, Qwen2Moe, Qwen3Moe, Qwen3, Phi3, Gemma2, Gemma3 };

// The feed-forward of a mixture-of-experts model (every layer): a router picks k of E experts per
// token (backend/moe_routing.h); Qwen2-MoE adds a shared expert scaled by a sigmoid gate.
struct MoeConfig {
  MoeRouting routing;          // E, k, gating, normalization, scale
  int64_t expert_ffn_dim = 0;  // <arch>.expert_feed_forward_length (rows of one expert's gate/up)
  int64_t shared_ffn_dim = 0;  // <arch>.expert_shared_feed_forward_length; 0 = no shared expert

  int64_t n_experts() const { return routing.n_experts; }
  int64_t n_used() const { return routing.n_used; }
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;          // general.architecture: llama, qwen2, qwen2moe, qwen3moe, qwen3, phi3, gemma2, gemma3
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
  bool qkv_bias = false;          // attn_{q,k,v}.bias present (qwen2, qwen2moe)
  bool qk_norm = false;           // attn_{q,k}_norm: RMSNorm of each query/key head before RoPE (qwen3, qwen3moe)
  bool fused_qkv = false;         // attn_qkv.weight {dim, q_dim + 2 kv_dim}: rows q | k | v (phi3)
  bool fused_gate_up = false;     // ffn_up.weight {dim, 2 ffn_dim}: rows gate | up, no ffn_gate (phi3)
  MoeConfig moe;                  // n_experts() == 0: a dense feed-forward
  // Sliding-window attention (Mistral, Gemma 2/3) and Gemma's extras (read_sliding_window, read_gemma):
  int64_t sliding_window = 0;     // <arch>.attention.sliding_window: a sliding layer sees the last W positions
  int64_t sliding_pattern = 0;    // 0: every layer slides; n: layer l slides iff l % n < n - 1 (gemma2: 2, gemma3: 6)
  float attn_scale = 0.f;         // query scale; 0: 1 / sqrt(head_dim) (attention_scale())
  float attn_softcap = 0.f;       // gemma2.attn_logit_softcapping: scores = c tanh(scores / c); 0: none
  float final_softcap = 0.f;      // gemma2.final_logit_softcapping: logits = c tanh(logits / c); 0: none
  float embed_scale = 0.f;        // gemma: the embeddings are multiplied by sqrt(dim); 0: not scaled
  bool gelu_ffn = false;          // gemma: GeGLU, gelu (tanh form) of the gate instead of silu
  bool post_norms = false;        // gemma2/3: post_attention_norm, post_ffw_norm on each sub-block's output
  float rope_freq_base_swa = 0.f; // gemma3: sliding layers rotate with base 10000, scale 1; 0: as the others

  bool is_moe() const { return moe.n_experts() > 0; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t gqa_group() const { return n_heads / n_kv_heads; }  // query heads per KV head
  // The window of layer `layer` (of the whole model): 0 for a global layer.
  int64_t layer_window(int64_t layer) const {
    if (sliding_window == 0) return 0;
    return sliding_pattern == 0 || layer % sliding_pattern < sliding_pattern - 1 ? sliding_window : 0;
  }
  // Every layer windowed: positions before the last window of a sequence are never read again, so
  // their KV blocks can go back to the pool (kv/block_manager.h). 0: some layer is global.
  int64_t kv_window() const { return sliding_pattern == 0 ? sliding_window : 0; }
  float attention_scale() const {
    return attn_scale > 0.f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  KvShape kv_shape() const { return {n_layers, n_kv_heads, head_dim}; }
  // KV cache bytes per token: 2 (K and V) * layers * kv_heads * head_dim * bytes per element.
  double kv_bytes_per_token(double bytes_per_elem) const {
    return 2.0 * static_cast<double>(n_layers * n_kv_heads * head_dim) * bytes_per_elem;
  }

  // Reads and validates the config. Throws FormatError("PATH: ...") for a missing/inconsistent
  // key or tensor shape, and for an unsupported architecture, listing the supported ones.
  static ModelConfig from_model_file(const ModelFile& file);
};

// {"llama", "qwen2", "qwen2moe", "qwen3moe", "qwen3", "phi3", "gemma2", "gemma3"}
std::span<const std::string_view> supported_architectures();

}  // namespace peregrine
