#pragma once
// Tiny synthetic model shapes covering every architecture and KV-head layout, small enough that
// the scalar reference runs in milliseconds.
#include <ostream>
#include <string>
#include <vector>

#include "synth/synthetic.h"

namespace peregrine {
// GoogleTest prints a spec parameter by its name instead of its bytes.
inline void PrintTo(const SyntheticSpec& s, std::ostream* os) { *os << s.name; }
}  // namespace peregrine

namespace peregrine::test {

inline SyntheticSpec tiny_spec(std::string name, std::string arch, int64_t dim, int64_t n_heads,
                               int64_t n_kv_heads, int64_t ffn_dim, int64_t n_vocab) {
  SyntheticSpec s;
  s.arch = std::move(arch);
  s.name = std::move(name);
  s.dim = dim;
  s.n_layers = 2;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.ffn_dim = ffn_dim;
  s.n_vocab = n_vocab;
  s.context_length = 64;
  return s;
}

// Qwen3- and Gemma 3-style heads: head_dim 128 (wider than dim / n_heads), tied head, eps 1e-6,
// RoPE base 1e6.
inline SyntheticSpec wide_heads_tied(SyntheticSpec s) {
  s.key_length = 128;
  s.tied_output = true;
  s.rms_eps = 1e-6f;
  s.rope_freq_base = 1000000.f;
  return s;
}

// Row lengths are multiples of 256 where a K-quant must apply (dim, ffn_dim), except where a
// spec exists to exercise the Q8_0 fallback.
inline std::vector<SyntheticSpec> tiny_specs() {
  std::vector<SyntheticSpec> specs;
  specs.push_back(tiny_spec("llama-mha-untied", "llama", 256, 4, 4, 512, 300));
  SyntheticSpec gqa = tiny_spec("llama-gqa-tied", "llama", 256, 8, 2, 256, 384);
  gqa.tied_output = true;
  specs.push_back(gqa);
  specs.push_back(tiny_spec("llama-mqa-untied", "llama", 256, 4, 1, 512, 320));
  SyntheticSpec qwen = tiny_spec("qwen2-bias-tied", "qwen2", 256, 4, 2, 512, 448);
  qwen.qkv_bias = true;
  qwen.tied_output = true;
  qwen.rms_eps = 1e-6f;
  qwen.rope_freq_base = 1000000.f;
  specs.push_back(qwen);
  SyntheticSpec llama3 = tiny_spec("llama3-rope-freqs", "llama", 256, 4, 2, 256, 512);
  llama3.llama3_rope_freqs = true;
  llama3.tied_output = true;
  llama3.rope_freq_base = 500000.f;
  specs.push_back(llama3);
  // dim 96: not a multiple of 256, so K-quant matrices fall back to Q8_0.
  specs.push_back(tiny_spec("llama-dim96-fallback", "llama", 96, 2, 1, 256, 290));
  return specs;
}

// Mixtures of experts, one per architecture: Mixtral-style llama, qwen2moe (shared expert, QKV
// bias, expert rows of 128 so K-quant down projections fall back to Q8_0) and qwen3moe (q/k
// norms, head_dim 128 > dim / n_heads, tied head).
inline std::vector<SyntheticSpec> tiny_moe_specs() {
  std::vector<SyntheticSpec> specs;
  SyntheticSpec mixtral = tiny_spec("mixtral-gqa-untied", "llama", 256, 4, 2, 256, 320);
  mixtral.n_experts = 4;
  mixtral.n_experts_used = 2;
  specs.push_back(mixtral);
  SyntheticSpec qwen2 = tiny_spec("qwen2moe-shared-bias", "qwen2moe", 256, 4, 4, 512, 384);
  qwen2.qkv_bias = true;
  qwen2.rms_eps = 1e-6f;
  qwen2.rope_freq_base = 1000000.f;
  qwen2.n_experts = 8;
  qwen2.n_experts_used = 3;
  qwen2.expert_ffn_dim = 128;
  qwen2.shared_ffn_dim = 512;
  specs.push_back(qwen2);
  SyntheticSpec qwen3 = wide_heads_tied(tiny_spec("qwen3moe-qknorm-tied", "qwen3moe", 256, 4, 2, 512, 300));
  qwen3.n_experts = 6;
  qwen3.n_experts_used = 2;
  qwen3.expert_ffn_dim = 256;
  specs.push_back(qwen3);
  return specs;
}

// Sliding windows (3 positions: shorter than the 10-token test sequence and than the test's
// 4-slot blocks) and Gemma: Mistral-style llama (every layer windowed), gemma2 (every other layer;
// soft-caps small enough to bite), gemma3 (6 layers, so one is global; q/k norms, head_dim 128 >
// dim / n_heads, local RoPE base vs linear-scaled global RoPE).
inline std::vector<SyntheticSpec> tiny_window_specs() {
  std::vector<SyntheticSpec> specs;
  SyntheticSpec mistral = tiny_spec("mistral-window3", "llama", 256, 4, 2, 512, 300);
  mistral.sliding_window = 3;
  specs.push_back(mistral);
  SyntheticSpec gemma2 = tiny_spec("gemma2-window3-caps", "gemma2", 256, 4, 2, 512, 320);
  gemma2.sliding_window = 3;
  gemma2.tied_output = true;
  gemma2.rms_eps = 1e-6f;
  gemma2.attn_softcap = 4.f;
  gemma2.final_softcap = 5.f;
  specs.push_back(gemma2);
  SyntheticSpec gemma3 = wide_heads_tied(tiny_spec("gemma3-window3-qknorm", "gemma3", 256, 4, 1, 512, 384));
  gemma3.n_layers = 6;
  gemma3.sliding_window = 3;
  gemma3.rope_linear_factor = 8.f;
  specs.push_back(gemma3);
  return specs;
}

// Qwen3 (q/k norms, no biases, head_dim 128 > dim / n_heads, tied head) and Phi-3 (fused QKV and
// gate/up, GQA, untied head).
inline std::vector<SyntheticSpec> tiny_qwen3_phi3_specs() {
  std::vector<SyntheticSpec> specs;
  specs.push_back(wide_heads_tied(tiny_spec("qwen3-qknorm-tied", "qwen3", 256, 4, 2, 512, 300)));
  specs.push_back(tiny_spec("phi3-fused-gqa", "phi3", 256, 8, 2, 512, 320));
  return specs;
}

}  // namespace peregrine::test
