#include "synth/synthetic.h"

#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "format/gguf.h"
#include "format/rope_scaling.h"
#include "synth/random.h"
#include "synth/synthetic_vocab.h"
#include "util/error.h"

namespace peregrine {
namespace {

// The first five have the true shapes of public models (for benchmarks); the tiny-* ones are
// small enough to write and run in a test, one per architecture variant.
constexpr std::array<std::string_view, 24> kPresetNames = {
    "stories15m",        "stories110m", "tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b", "mixtral-8x7b",
    "qwen1.5-moe-a2.7b", "tiny-llama",  "tiny-llama3",    "tiny-qwen2",   "tiny-mixtral", "tiny-qwen2moe",
    "tiny-qwen3moe",     "qwen3-0.6b",  "phi3-mini-4k",   "tiny-qwen3",   "tiny-phi3",    "mistral-7b",
    "mistral-tiny",      "gemma2-2b",   "gemma2-tiny",    "gemma3-1b",    "gemma3-tiny",  "llama-3.2-3b"};

SyntheticSpec make_spec(std::string arch, std::string name, int64_t dim, int64_t n_layers,
                        int64_t n_heads, int64_t n_kv_heads, int64_t ffn_dim, int64_t n_vocab,
                        int64_t context_length) {
  SyntheticSpec s;
  s.arch = std::move(arch);
  s.name = std::move(name);
  s.dim = dim;
  s.n_layers = n_layers;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.ffn_dim = ffn_dim;
  s.n_vocab = n_vocab;
  s.context_length = context_length;
  return s;
}

// Qwen3's settings beyond the shape: head_dim 128 whatever dim / n_heads, RoPE base 1e6, RMSNorm
// epsilon 1e-6, the head tied to the embedding.
SyntheticSpec qwen3_settings(SyntheticSpec s) {
  s.key_length = 128;
  s.rope_freq_base = 1000000.f;
  s.rms_eps = 1e-6f;
  s.tied_output = true;
  return s;
}

// Llama 3.2's settings beyond the shape: RoPE base 500000 with Llama 3's frequency factors, the
// head tied to the embedding.
SyntheticSpec llama32_settings(SyntheticSpec s) {
  s.rope_freq_base = 500000.f;
  s.tied_output = true;
  s.llama3_rope_freqs = true;
  return s;
}

// Expert counts and widths: which an architecture needs, and in range.
template <class Fail, class InRange>
void validate_experts(const SyntheticSpec& s, const Fail& fail, const InRange& in_range) {
  const bool moe_arch = s.arch == "qwen2moe" || s.arch == "qwen3moe";
  if (!s.is_moe()) {
    if (moe_arch) fail(s.arch + " needs n_experts > 0");
    if (s.n_experts < 0 || s.n_experts_used != 0 || s.expert_ffn_dim != 0 || s.shared_ffn_dim != 0) {
      fail("expert settings without n_experts");
    }
    return;
  }
  if (s.arch == "qwen2" || s.arch == "qwen3") fail(s.arch + " has no experts (" + s.arch + "moe has)");
  in_range("n_experts", s.n_experts, 1, 512);
  in_range("n_experts_used", s.n_experts_used, 1, s.n_experts);
  if (s.arch == "llama" && s.expert_ffn_dim != 0 && s.expert_ffn_dim != s.ffn_dim) {
    fail("llama (Mixtral) experts are ffn_dim wide; expert_ffn_dim must be 0 or ffn_dim");
  }
  if (moe_arch) in_range("expert_ffn_dim", s.expert_ffn_dim, 1, 1 << 18);
  if (s.arch == "qwen2moe") {
    in_range("shared_ffn_dim", s.shared_ffn_dim, 1, 1 << 18);
  } else if (s.shared_ffn_dim != 0) {
    fail("only qwen2moe has a shared expert");
  }
}

SyntheticSpec with_experts(SyntheticSpec s, int64_t n_experts, int64_t n_used, int64_t expert_ffn, int64_t shared_ffn) {
  s.n_experts = n_experts;
  s.n_experts_used = n_used;
  s.expert_ffn_dim = expert_ffn;
  s.shared_ffn_dim = shared_ffn;
  return s;
}

bool is_gemma(const SyntheticSpec& s) { return s.arch == "gemma2" || s.arch == "gemma3"; }

// The window, soft-caps and RoPE scaling: which architecture may have them.
template <class Fail>
void validate_window(const SyntheticSpec& s, const Fail& fail) {
  if (s.sliding_window < 0 || s.sliding_window > (1 << 24)) fail("sliding_window out of range");
  if (s.sliding_window > 0 && s.arch != "llama" && !is_gemma(s)) fail(s.arch + " has no sliding window");
  if (s.arch == "gemma3" && s.sliding_window == 0) fail("gemma3 needs a sliding_window");
  if (!(s.attn_softcap >= 0.f) || !(s.final_softcap >= 0.f) || !(s.rope_linear_factor >= 0.f)) {
    fail("soft-caps and the RoPE factor must be >= 0");
  }
  if ((s.attn_softcap > 0.f || s.final_softcap > 0.f) && s.arch != "gemma2") fail("only gemma2 has soft-caps");
  if (is_gemma(s) && s.is_moe()) fail("gemma has no experts");
}

// How a tensor's values are drawn.
enum class Fill {
  Matrix,      // N(0, 1) / sqrt(row length): keeps each matrix-vector product at unit scale
  NormWeight,  // 1 + 0.1 N(0, 1): near 1 like trained RMSNorm gains, but not trivially 1
  Bias,        // 0.5 N(0, 1): large enough that a path ignoring the bias fails the tests
  RopeFreqs,   // the Llama 3 factors (not random)
  Router,      // 2 N(0, 1) / sqrt(row length): router logits of spread ~2, so a token's experts are
               // mostly chosen by clear margins (as trained routers choose them) rather than by
               // near-ties another engine's rounding could flip, while the runner-up experts still
               // carry weights of 0.1-0.4
};

struct TensorRecipe {
  SyntheticTensor tensor;
  Fill fill;
};

// The type of a weight matrix (or expert stack) with rows of n_in: the scheme's, with
// llama.cpp's fallback for rows its blocks do not divide.
TensorType weight_type_of(const SyntheticSpec& s, const QuantScheme& scheme, const std::string& name, int64_t n_in) {
  if (scheme.mix == QuantMix::None) return fallback_type(scheme.base, n_in);
  const QuantModelInfo model{.n_layers = s.n_layers,
                             .n_gqa = s.n_heads / s.n_kv_heads,
                             .n_experts = s.n_experts,
                             .has_output = !s.tied_output};
  return mix_tensor_type(scheme, model, name, n_in);
}

std::vector<TensorRecipe> recipes(const SyntheticSpec& s, const QuantScheme& scheme) {
  const int64_t head_dim = s.head_dim();
  const int64_t q_dim = s.n_heads * head_dim;
  const int64_t kv_dim = s.n_kv_heads * head_dim;
  std::vector<TensorRecipe> out;
  auto matrix = [&](std::string name, int64_t n_in, int64_t n_out) {
    const TensorType t = weight_type_of(s, scheme, name, n_in);
    out.push_back({{std::move(name), t, {n_in, n_out}}, Fill::Matrix});
  };
  auto experts = [&](std::string name, int64_t n_in, int64_t n_out) {
    const TensorType t = weight_type_of(s, scheme, name, n_in);
    out.push_back({{std::move(name), t, {n_in, n_out, s.n_experts}}, Fill::Matrix});
  };
  auto vector = [&](std::string name, int64_t n, Fill fill) {
    out.push_back({{std::move(name), TensorType::F32, {n}}, fill});
  };
  // The feed-forward of one layer: dense, or a router with stacked experts (+ a shared expert).
  auto ffn = [&](const std::string& p) {
    if (s.arch == "phi3") {  // gate and up fused: ffn_up holds 2 ffn_dim rows, gate first
      matrix(p + "ffn_down.weight", s.ffn_dim, s.dim);
      matrix(p + "ffn_up.weight", s.dim, 2 * s.ffn_dim);
      return;
    }
    if (!s.is_moe()) {
      matrix(p + "ffn_gate.weight", s.dim, s.ffn_dim);
      matrix(p + "ffn_down.weight", s.ffn_dim, s.dim);
      matrix(p + "ffn_up.weight", s.dim, s.ffn_dim);
      return;
    }
    const int64_t ffe = s.expert_width();
    out.push_back({{p + "ffn_gate_inp.weight", TensorType::F32, {s.dim, s.n_experts}}, Fill::Router});
    experts(p + "ffn_gate_exps.weight", s.dim, ffe);
    experts(p + "ffn_down_exps.weight", ffe, s.dim);
    experts(p + "ffn_up_exps.weight", s.dim, ffe);
    if (s.shared_ffn_dim > 0) {
      vector(p + "ffn_gate_inp_shexp.weight", s.dim, Fill::Matrix);
      matrix(p + "ffn_gate_shexp.weight", s.dim, s.shared_ffn_dim);
      matrix(p + "ffn_down_shexp.weight", s.shared_ffn_dim, s.dim);
      matrix(p + "ffn_up_shexp.weight", s.dim, s.shared_ffn_dim);
    }
  };

  matrix("token_embd.weight", s.dim, s.n_vocab);
  if (s.llama3_rope_freqs) vector("rope_freqs.weight", head_dim / 2, Fill::RopeFreqs);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vector(p + "attn_norm.weight", s.dim, Fill::NormWeight);
    if (s.arch == "phi3") {  // q, k and v fused: rows q | k | v
      matrix(p + "attn_qkv.weight", s.dim, q_dim + 2 * kv_dim);
    } else {
      matrix(p + "attn_q.weight", s.dim, q_dim);
      matrix(p + "attn_k.weight", s.dim, kv_dim);
      matrix(p + "attn_v.weight", s.dim, kv_dim);
    }
    if (s.qkv_bias) {
      vector(p + "attn_q.bias", q_dim, Fill::Bias);
      vector(p + "attn_k.bias", kv_dim, Fill::Bias);
      vector(p + "attn_v.bias", kv_dim, Fill::Bias);
    }
    if (s.arch == "qwen3moe" || s.arch == "qwen3" || s.arch == "gemma3") {
      vector(p + "attn_q_norm.weight", head_dim, Fill::NormWeight);
      vector(p + "attn_k_norm.weight", head_dim, Fill::NormWeight);
    }
    matrix(p + "attn_output.weight", q_dim, s.dim);
    // Gemma's norm gains are stored with the +1 already added, as llama.cpp's converter writes them.
    if (is_gemma(s)) vector(p + "post_attention_norm.weight", s.dim, Fill::NormWeight);
    vector(p + "ffn_norm.weight", s.dim, Fill::NormWeight);
    ffn(p);
    if (is_gemma(s)) vector(p + "post_ffw_norm.weight", s.dim, Fill::NormWeight);
  }
  vector("output_norm.weight", s.dim, Fill::NormWeight);
  if (!s.tied_output) matrix("output.weight", s.dim, s.n_vocab);
  return out;
}

// Fills `dst` with the tensor's values, one row at a time (only one f32 row is ever held).
void produce(const TensorRecipe& pt, const SyntheticSpec& spec, uint64_t seed, std::span<std::byte> dst) {
  const SyntheticTensor& t = pt.tensor;
  const int64_t row_len = t.shape[0];
  int64_t n_rows = 1;  // every dimension past the first: 2-D matrices and 3-D expert stacks
  for (size_t d = 1; d < t.shape.size(); ++d) n_rows *= t.shape[d];
  const size_t row_bytes = tensor_bytes(t.type, row_len);
  synth::NormalSampler rng(seed ^ synth::fnv1a64(t.name));
  std::vector<float> row(static_cast<size_t>(row_len));
  std::vector<float> rope_factors;
  if (pt.fill == Fill::RopeFreqs) rope_factors = llama3_rope_freq_factors(spec.head_dim(), spec.rope_freq_base);
  const double matrix_std = 1.0 / std::sqrt(static_cast<double>(row_len));

  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < row_len; ++i) {
      double x = 0.0;
      switch (pt.fill) {
        case Fill::Matrix: x = rng.next() * matrix_std; break;
        case Fill::Router: x = 2.0 * rng.next() * matrix_std; break;
        case Fill::NormWeight: x = 1.0 + 0.1 * rng.next(); break;
        case Fill::Bias: x = 0.5 * rng.next(); break;
        case Fill::RopeFreqs: x = rope_factors[static_cast<size_t>(i)]; break;
      }
      row[static_cast<size_t>(i)] = static_cast<float>(x);
    }
    std::byte* out = dst.data() + static_cast<size_t>(r) * row_bytes;
    if (t.type == TensorType::F32) {
      std::memcpy(out, row.data(), row_bytes);
    } else {
      quantize_row(t.type, row.data(), out, row_len);
    }
  }
}

// Sliding-window presets: Mistral 7B v0.1 and Gemma 2 2B / Gemma 3 1B at their true shapes, and
// tiny ones whose windows (16, 8) are shorter than a test's context, so tests exercise them.
std::optional<SyntheticSpec> window_preset(std::string_view name) {
  if (name == "mistral-7b") {
    SyntheticSpec s = make_spec("llama", "Mistral-7B-v0.1", 4096, 32, 32, 8, 14336, 32000, 32768);
    s.sliding_window = 4096;
    return s;
  }
  if (name == "mistral-tiny") {
    SyntheticSpec s = make_spec("llama", "mistral-tiny", 256, 4, 8, 2, 512, 2048, 512);
    s.sliding_window = 16;
    return s;
  }
  auto gemma = [](std::string arch, std::string n, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                  int64_t ffn, int64_t vocab, int64_t ctx, int64_t head_dim, int64_t window) {
    SyntheticSpec s = make_spec(std::move(arch), std::move(n), dim, layers, heads, kv_heads, ffn, vocab, ctx);
    s.key_length = head_dim;
    s.sliding_window = window;
    s.tied_output = true;
    s.rms_eps = 1e-6f;
    return s;
  };
  if (name == "gemma2-2b") {
    SyntheticSpec s = gemma("gemma2", "Gemma-2-2B", 2304, 26, 8, 4, 9216, 256000, 8192, 256, 4096);
    s.attn_softcap = 50.f;
    s.final_softcap = 30.f;
    return s;
  }
  if (name == "gemma2-tiny") {  // caps small enough to bite on random weights
    SyntheticSpec s = gemma("gemma2", "gemma2-tiny", 256, 4, 4, 2, 512, 2048, 512, 64, 8);
    s.attn_softcap = 4.f;
    s.final_softcap = 5.f;
    return s;
  }
  if (name == "gemma3-1b") {
    SyntheticSpec s = gemma("gemma3", "Gemma-3-1B", 1152, 26, 4, 1, 6912, 262144, 32768, 256, 512);
    s.rope_freq_base = 1000000.f;
    return s;
  }
  if (name == "gemma3-tiny") {  // 6 layers: five windowed, one global with linear RoPE scaling
    SyntheticSpec s = gemma("gemma3", "gemma3-tiny", 256, 6, 4, 1, 512, 2048, 512, 128, 8);
    s.rope_freq_base = 1000000.f;
    s.rope_linear_factor = 8.f;
    return s;
  }
  return std::nullopt;
}

// Phi-3's vocabulary has the control token <|endoftext|>, and llama.cpp looks it up by text when a
// model's name contains "phi3" or "phi-3" (to set its strip attributes), failing to load a file
// without it: the last synthetic piece becomes that token.
void add_phi3_end_of_text(Metadata& m, int64_t n_vocab) {
  synth::SyntheticVocab v = synth::make_synthetic_vocab(n_vocab);
  v.tokens.back() = "<|endoftext|>";
  v.scores.back() = 0.f;
  v.types.back() = static_cast<int32_t>(synth::TokenType::Control);
  m.set("tokenizer.ggml.tokens", MetaValue::string_array(v.tokens));
  m.set("tokenizer.ggml.scores", MetaValue::f32_array(v.scores));
  m.set("tokenizer.ggml.token_type", MetaValue::i32_array(v.types));
}

}  // namespace

std::span<const std::string_view> synthetic_preset_names() { return kPresetNames; }

std::optional<SyntheticSpec> synthetic_preset(std::string_view name) {
  if (name == "stories15m") return make_spec("llama", "stories15M", 288, 6, 6, 6, 768, 32000, 256);
  if (name == "stories110m") return make_spec("llama", "stories110M", 768, 12, 12, 12, 2048, 32000, 1024);
  if (name == "tinyllama-1.1b") return make_spec("llama", "TinyLlama-1.1B", 2048, 22, 32, 4, 5632, 32000, 2048);
  if (name == "llama-3.2-1b") {
    return llama32_settings(make_spec("llama", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, 131072));
  }
  if (name == "llama-3.2-3b") {
    return llama32_settings(make_spec("llama", "Llama-3.2-3B", 3072, 28, 24, 8, 8192, 128256, 131072));
  }
  if (name == "qwen2.5-0.5b") {
    SyntheticSpec s = make_spec("qwen2", "Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, 32768);
    s.rope_freq_base = 1000000.f;
    s.tied_output = true;
    s.qkv_bias = true;
    s.rms_eps = 1e-6f;
    return s;
  }
  if (name == "mixtral-8x7b") {
    SyntheticSpec s = make_spec("llama", "Mixtral-8x7B", 4096, 32, 32, 8, 14336, 32000, 32768);
    s.rope_freq_base = 1000000.f;
    return with_experts(s, 8, 2, 0, 0);
  }
  if (name == "qwen1.5-moe-a2.7b") {  // 60 routed experts (top 4) + a shared expert 4 experts wide
    SyntheticSpec s = make_spec("qwen2moe", "Qwen1.5-MoE-A2.7B", 2048, 24, 16, 16, 5632, 151936, 8192);
    s.rope_freq_base = 1000000.f;
    s.qkv_bias = true;
    s.rms_eps = 1e-6f;
    return with_experts(s, 60, 4, 1408, 5632);
  }
  if (name == "tiny-llama") return make_spec("llama", "tiny-llama", 256, 4, 8, 2, 512, 2048, 512);
  if (name == "tiny-llama3") {  // MQA, tied head, Llama 3 rope_freqs
    SyntheticSpec s = make_spec("llama", "tiny-llama3", 256, 4, 8, 1, 512, 2048, 512);
    s.rope_freq_base = 500000.f;
    s.tied_output = true;
    s.llama3_rope_freqs = true;
    return s;
  }
  if (name == "tiny-qwen2") {  // QKV bias, NEOX RoPE, tied head
    SyntheticSpec s = make_spec("qwen2", "tiny-qwen2", 256, 4, 8, 2, 512, 2048, 512);
    s.rope_freq_base = 1000000.f;
    s.tied_output = true;
    s.qkv_bias = true;
    s.rms_eps = 1e-6f;
    return s;
  }
  if (name == "tiny-mixtral") return with_experts(make_spec("llama", "tiny-mixtral", 256, 4, 8, 2, 512, 2048, 512), 8, 2, 0, 0);
  if (name == "tiny-qwen2moe") {  // QKV bias, NEOX RoPE, MHA, 16 experts (top 4) + shared expert
    SyntheticSpec s = make_spec("qwen2moe", "tiny-qwen2moe", 256, 4, 8, 8, 512, 2048, 512);
    s.rope_freq_base = 1000000.f;
    s.qkv_bias = true;
    s.rms_eps = 1e-6f;
    return with_experts(s, 16, 4, 128, 512);
  }
  if (name == "tiny-qwen3moe") {  // q/k norms, head_dim 128 > dim / n_heads, tied head
    SyntheticSpec s = make_spec("qwen3moe", "tiny-qwen3moe", 256, 4, 4, 2, 768, 2048, 512);
    s.key_length = 128;
    s.rope_freq_base = 1000000.f;
    s.rms_eps = 1e-6f;
    s.tied_output = true;
    return with_experts(s, 8, 2, 256, 0);
  }
  // Qwen3: q/k norms, head_dim 128 (> 1024 / 16 and 256 / 4), GQA, tied head.
  if (name == "qwen3-0.6b")
    return qwen3_settings(make_spec("qwen3", "Qwen3-0.6B", 1024, 28, 16, 8, 3072, 151936, 40960));
  if (name == "tiny-qwen3") return qwen3_settings(make_spec("qwen3", "tiny-qwen3", 256, 4, 4, 2, 512, 2048, 512));
  if (name == "phi3-mini-4k") return make_spec("phi3", "Phi-3-mini-4k", 3072, 32, 32, 32, 8192, 32064, 4096);
  if (name == "tiny-phi3") return make_spec("phi3", "tiny-phi3", 256, 4, 8, 2, 512, 2048, 512);  // fused QKV, gate/up
  return window_preset(name);
}

void validate_synthetic_spec(const SyntheticSpec& s) {
  auto fail = [&](const std::string& why) {
    throw UsageError("synthetic model '" + s.name + "': " + why);
  };
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen2moe" && s.arch != "qwen3moe" && s.arch != "qwen3" &&
      s.arch != "phi3" && !is_gemma(s)) {
    fail("unsupported architecture '" + s.arch + "' (llama, qwen2, qwen2moe, qwen3moe, qwen3, phi3, gemma2, gemma3)");
  }
  // llama.cpp's phi3 reads attn_output as {dim, dim}: the query width must be dim.
  if (s.arch == "phi3" && (s.qkv_bias || s.key_length != 0 || s.is_moe())) {
    fail("phi3 has no biases, no experts and head_dim = dim / n_heads");
  }
  auto in_range = [&](const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      fail(std::string(what) + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    }
  };
  in_range("dim", s.dim, 2, 1 << 16);
  in_range("n_layers", s.n_layers, 1, 1024);
  in_range("n_heads", s.n_heads, 1, 1024);
  in_range("n_kv_heads", s.n_kv_heads, 1, s.n_heads);
  in_range("ffn_dim", s.ffn_dim, 1, 1 << 18);
  in_range("n_vocab", s.n_vocab, synth::kFirstPieceId + 1, 1 << 22);
  in_range("context_length", s.context_length, 1, 1 << 24);
  if (s.key_length == 0 && s.dim % s.n_heads != 0) fail("dim must be a multiple of n_heads (or key_length set)");
  in_range("key_length", s.key_length, 0, 1024);
  if (s.head_dim() % 2 != 0) fail("head_dim must be even for RoPE");
  if (s.n_heads % s.n_kv_heads != 0) fail("n_heads must be a multiple of n_kv_heads");
  if (!(s.rms_eps > 0.f) || !(s.rope_freq_base > 1.f)) fail("rms_eps must be > 0 and rope_freq_base > 1");
  validate_experts(s, fail, in_range);
  validate_window(s, fail);
}

std::vector<float> llama3_rope_freq_factors(int64_t rope_dim, float freq_base) {
  return llama3_rope_factors(rope_dim, freq_base, {.factor = 32.0});  // Llama 3.2 1B/3B
}

Metadata synthetic_metadata(const SyntheticSpec& s, const QuantScheme& scheme) {
  validate_synthetic_spec(s);
  Metadata m;
  const std::string a = s.arch + ".";
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  m.set("general.architecture", MetaValue::string(s.arch));
  m.set("general.name", MetaValue::string(s.name));
  m.set("general.file_type", MetaValue::u32(llama_file_type(scheme)));
  m.set("general.quantization_version", MetaValue::u32(2));
  m.set(a + "vocab_size", u32(s.n_vocab));
  m.set(a + "context_length", u32(s.context_length));
  m.set(a + "embedding_length", u32(s.dim));
  m.set(a + "block_count", u32(s.n_layers));
  m.set(a + "feed_forward_length", u32(s.ffn_dim));
  m.set(a + "rope.dimension_count", u32(s.head_dim()));
  m.set(a + "attention.head_count", u32(s.n_heads));
  m.set(a + "attention.head_count_kv", u32(s.n_kv_heads));
  m.set(a + "attention.layer_norm_rms_epsilon", MetaValue::f32(s.rms_eps));
  m.set(a + "rope.freq_base", MetaValue::f32(s.rope_freq_base));
  if (s.key_length > 0) {
    m.set(a + "attention.key_length", u32(s.key_length));
    m.set(a + "attention.value_length", u32(s.key_length));
  }
  if (s.sliding_window > 0) m.set(a + "attention.sliding_window", u32(s.sliding_window));
  if (s.attn_softcap > 0.f) m.set(a + "attn_logit_softcapping", MetaValue::f32(s.attn_softcap));
  if (s.final_softcap > 0.f) m.set(a + "final_logit_softcapping", MetaValue::f32(s.final_softcap));
  if (s.rope_linear_factor > 0.f) {
    m.set(a + "rope.scaling.type", MetaValue::string("linear"));
    m.set(a + "rope.scaling.factor", MetaValue::f32(s.rope_linear_factor));
  }
  if (s.is_moe()) {
    m.set(a + "expert_count", u32(s.n_experts));
    m.set(a + "expert_used_count", u32(s.n_experts_used));
    if (s.arch != "llama") m.set(a + "expert_feed_forward_length", u32(s.expert_ffn_dim));
    if (s.shared_ffn_dim > 0) m.set(a + "expert_shared_feed_forward_length", u32(s.shared_ffn_dim));
  }
  synth::add_synthetic_vocab_metadata(m, s.n_vocab);
  if (s.arch == "phi3") add_phi3_end_of_text(m, s.n_vocab);
  return m;
}

std::vector<SyntheticTensor> synthetic_tensors(const SyntheticSpec& s, const QuantScheme& scheme) {
  validate_synthetic_spec(s);
  std::vector<SyntheticTensor> out;
  for (TensorRecipe& p : recipes(s, scheme)) out.push_back(std::move(p.tensor));
  return out;
}

void write_synthetic_gguf(const SyntheticSpec& spec, const QuantScheme& scheme, uint64_t seed,
                          const std::filesystem::path& out, const std::function<void(uint64_t, uint64_t)>& progress) {
  GgufWriter writer(synthetic_metadata(spec, scheme));
  for (TensorRecipe& p : recipes(spec, scheme)) {
    SyntheticTensor t = p.tensor;
    writer.add_tensor(std::move(t.name), t.type, std::move(t.shape),
                      [p, spec, seed](std::span<std::byte> dst) { produce(p, spec, seed, dst); });
  }
  writer.write(out, progress);
}

void write_synthetic_gguf_header_only(const SyntheticSpec& spec, const QuantScheme& scheme,
                                      const std::filesystem::path& out) {
  GgufWriter writer(synthetic_metadata(spec, scheme));
  for (TensorRecipe& p : recipes(spec, scheme)) {
    writer.add_tensor(std::move(p.tensor.name), p.tensor.type, std::move(p.tensor.shape), {});
  }
  writer.write_header_only(out);
}

}  // namespace peregrine
