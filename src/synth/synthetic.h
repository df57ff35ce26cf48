#pragma once
// Random-weight models written as GGUF files that peregrine and llama.cpp both load: the same
// tensor names, metadata keys and SentencePiece-style vocabulary as a converted model, with
// weights drawn deterministically from a seed. Used for tests (tiny custom shapes) and for
// benchmarks at the true shapes of real models (presets) without downloading anything.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/metadata.h"
#include "format/quant_scheme.h"
#include "format/tensor_type.h"

namespace peregrine {

struct SyntheticSpec {
  std::string arch = "llama";     // llama | qwen2 | qwen2moe | qwen3moe | qwen3 | phi3 (fused QKV, gate/up) | gemma2 | gemma3
  std::string name;               // general.name
  int64_t dim = 0;                // embedding length
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;         // == n_heads: MHA, 1: MQA, otherwise GQA
  int64_t ffn_dim = 0;
  int64_t n_vocab = 0;            // >= 260: 3 specials + 256 byte tokens + at least one piece
  int64_t context_length = 0;
  bool tied_output = false;       // no output.weight: the head reuses token_embd.weight
  bool qkv_bias = false;          // attn_{q,k,v}.bias (qwen2)
  float rope_freq_base = 10000.f;
  bool llama3_rope_freqs = false; // rope_freqs.weight with Llama 3 scaling factors (see below)
  float rms_eps = 1e-5f;
  int64_t key_length = 0;         // head dim when it is not dim / n_heads (written as key_length); 0 = dim / n_heads
  // Mixture of experts: llama with n_experts > 0 is Mixtral-style (experts ffn_dim wide); qwen2moe
  // (plus a shared expert) and qwen3moe (q/k norms) always have experts.
  int64_t n_experts = 0;          // E
  int64_t n_experts_used = 0;     // k
  int64_t expert_ffn_dim = 0;     // qwen2moe / qwen3moe: one expert's width
  int64_t shared_ffn_dim = 0;     // qwen2moe: the shared expert's width
  // Sliding windows and Gemma: llama with a window is Mistral-style (every layer; the key
  // llama.attention.sliding_window, which llama.cpp ignores); gemma2 / gemma3 interleave windowed
  // and global layers and add post-norms (gemma3: q/k norms too).
  int64_t sliding_window = 0;     // 0: none (gemma3 needs one; gemma2 then defaults to 4096)
  float attn_softcap = 0.f;       // gemma2.attn_logit_softcapping; 0: key not written (llama.cpp's 50)
  float final_softcap = 0.f;      // gemma2.final_logit_softcapping; 0: key not written (llama.cpp's 30)
  float rope_linear_factor = 0.f; // rope.scaling linear with this factor (gemma3 4B+: 8); 0: none

  int64_t head_dim() const { return key_length > 0 ? key_length : n_heads > 0 ? dim / n_heads : 0; }
  bool is_moe() const { return n_experts > 0; }
  int64_t expert_width() const { return arch == "llama" ? ffn_dim : expert_ffn_dim; }
};

// Presets with the true shapes of real models: stories15m, stories110m, tinyllama-1.1b,
// llama-3.2-1b, llama-3.2-3b, qwen2.5-0.5b, mixtral-8x7b, qwen1.5-moe-a2.7b, qwen3-0.6b, phi3-mini-4k,
// mistral-7b, gemma2-2b, gemma3-1b; tiny-* and *-tiny ones for tests. nullopt for an unknown name.
std::optional<SyntheticSpec> synthetic_preset(std::string_view name);
std::span<const std::string_view> synthetic_preset_names();

// Throws UsageError naming the problem if the spec cannot describe a valid model.
void validate_synthetic_spec(const SyntheticSpec& spec);

// One tensor of the file as it will be written (in file order).
struct SyntheticTensor {
  std::string name;
  TensorType type;              // the scheme's type for it (fallback included)
  std::vector<int64_t> shape;   // GGUF order: shape[0] is the row length
};

// What write_synthetic_gguf writes, without generating any weights.
Metadata synthetic_metadata(const SyntheticSpec& spec, const QuantScheme& scheme);
std::vector<SyntheticTensor> synthetic_tensors(const SyntheticSpec& spec, const QuantScheme& scheme);

// Llama 3 per-frequency RoPE divisors with Llama 3.2 1B/3B's settings (factor 32; Llama 3.1
// uses 8), low/high frequency factors 1/4, original context 8192, computed the way Meta's
// reference and llama.cpp's converter compute them: rope_dim/2 values.
std::vector<float> llama3_rope_freq_factors(int64_t rope_dim, float freq_base);

// The scheme (a plain type or a mix, format/quant_scheme.h) applies to 2-D weight matrices and
// 3-D expert stacks; rows its type's blocks do not divide fall back as llama.cpp's quantizer does
// (fallback_type: Q4_K -> Q5_0, ..., else F16); norms, biases, rope_freqs and the expert routers
// stay F32 (llama.cpp's quantizer keeps ffn_gate_inp in F32 as well). progress(done_bytes,
// total_bytes) after each tensor. Weights are produced tensor by tensor while the file is
// written, so a 1B model never sits in memory. Same spec, type and seed give the same bytes on
// every run.
void write_synthetic_gguf(const SyntheticSpec& spec, const QuantScheme& scheme, uint64_t seed,
                          const std::filesystem::path& out,
                          const std::function<void(uint64_t, uint64_t)>& progress = {});

// The same file's metadata and tensor table, with the data region left as a hole (a sparse file
// that reads as zeros): for shapes too large to generate here that `info` and `kv-calc` still
// have to read. Not for running: every weight is zero.
void write_synthetic_gguf_header_only(const SyntheticSpec& spec, const QuantScheme& scheme,
                                      const std::filesystem::path& out);

}  // namespace peregrine
