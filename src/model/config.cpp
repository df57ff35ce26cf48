#include "model/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

constexpr std::array<std::string_view, 8> kSupportedArchitectures = {"llama", "qwen2", "qwen2moe", "qwen3moe",
                                                                     "qwen3", "phi3",  "gemma2",   "gemma3"};

// Upper limits far above any real model; they keep a corrupt file from making us size a KV
// cache or scratch buffer from a garbage count.
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxFfnDim = 1 << 20;
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

class ConfigReader {
 public:
  ConfigReader(const ModelFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  [[noreturn]] void fail(const std::string& problem) const { throw FormatError(file_.path + ": " + problem); }

  // Wraps the metadata getters so their file-less messages gain the path.
  template <typename F>
  auto guarded(F&& get) const -> decltype(get()) {
    try {
      return get();
    } catch (const FormatError& e) {
      fail(e.what());
    }
  }

  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  int64_t required_int(std::string_view suffix, int64_t lo, int64_t hi) const {
    const std::string k = key(suffix);
    int64_t v = guarded([&] { return file_.meta.get_int(k); });
    check_range(k, v, lo, hi);
    return v;
  }
  int64_t optional_int(std::string_view suffix, int64_t fallback, int64_t lo, int64_t hi) const {
    const std::string k = key(suffix);
    auto v = guarded([&] { return file_.meta.get_int_opt(k); });
    int64_t value = v.value_or(fallback);
    check_range(k, value, lo, hi);
    return value;
  }
  std::optional<double> optional_float(std::string_view suffix) const {
    const std::string k = key(suffix);
    return guarded([&] { return file_.meta.get_float_opt(k); });
  }
  std::optional<std::string> optional_string(std::string_view suffix) const {
    const std::string k = key(suffix);
    return guarded([&] { return file_.meta.get_string_opt(k); });
  }
  std::optional<bool> optional_bool(std::string_view suffix) const {
    const std::string k = key(suffix);
    return guarded([&] { return file_.meta.get_bool_opt(k); });
  }
  bool has(std::string_view suffix) const { return file_.meta.contains(key(suffix)); }

  void check_range(const std::string& k, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi) {
      fail("metadata '" + k + "' = " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    }
  }

 private:
  const ModelFile& file_;
  std::string arch_;
};

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Routed experts: counts, widths and the routing rule, as llama.cpp reads them for llama (Mixtral),
// qwen2moe and qwen3moe. Keys that would change the arithmetic in ways peregrine does not
// implement are refused by name.
void read_moe(const ModelFile& file, const ConfigReader& r, ModelConfig& c) {
  const bool moe_arch = c.arch == Arch::Qwen2Moe || c.arch == Arch::Qwen3Moe;
  if (!r.has("expert_count")) {
    if (moe_arch) r.fail("missing metadata key '" + r.key("expert_count") + "'");
    if (file.find("blk.0.ffn_gate_inp.weight")) {
      r.fail("tensor 'blk.0.ffn_gate_inp.weight' (an expert router) is present but metadata '" +
             r.key("expert_count") + "' is missing");
    }
    return;
  }
  MoeRouting& m = c.moe.routing;
  m.n_experts = r.required_int("expert_count", 1, kMaxExperts);
  if (!r.has("expert_used_count")) r.fail("missing metadata key '" + r.key("expert_used_count") + "'");
  m.n_used = r.required_int("expert_used_count", 1, kMaxExperts);
  if (m.n_used > m.n_experts) {
    r.fail("metadata '" + r.key("expert_used_count") + "' = " + std::to_string(m.n_used) + " exceeds '" +
           r.key("expert_count") + "' = " + std::to_string(m.n_experts));
  }
  // llama.cpp's defaults: Mixtral's experts are feed_forward_length wide; the Qwen MoEs' default
  // is feed_forward_length / k (their files always carry the key).
  c.moe.expert_ffn_dim =
      r.optional_int("expert_feed_forward_length", moe_arch ? c.ffn_dim / m.n_used : c.ffn_dim, 1, kMaxFfnDim);
  const bool shared = c.arch == Arch::Qwen2Moe;
  if (shared) {
    c.moe.shared_ffn_dim = r.optional_int("expert_shared_feed_forward_length", c.ffn_dim, 1, kMaxFfnDim);
  } else if (r.has("expert_shared_feed_forward_length")) {
    r.fail("metadata '" + r.key("expert_shared_feed_forward_length") + "': shared experts are not supported for " +
           c.arch_name + " (only qwen2moe has one)");
  }
  r.optional_int("expert_shared_count", shared ? 1 : 0, shared ? 1 : 0, shared ? 1 : 0);
  r.optional_int("expert_group_count", 0, 0, 0);  // group-limited routing (DeepSeek) is not implemented
  const int64_t gating = r.optional_int("expert_gating_func", 1, 1, 3);  // llama.cpp: 1 softmax, 2 sigmoid, 3 softmax after top-k
  m.gating = gating == 1 ? MoeGating::Softmax : gating == 2 ? MoeGating::Sigmoid : MoeGating::SoftmaxTopK;
  // Mixtral and Qwen3-MoE renormalize the k weights; Qwen2-MoE does not (norm_topk_prob false).
  m.normalize = r.optional_bool("expert_weights_norm").value_or(c.arch != Arch::Qwen2Moe);
  const double scale = r.optional_float("expert_weights_scale").value_or(0.0);  // 0: unset, as in llama.cpp
  if (!(std::isfinite(scale) && scale >= 0.0)) {
    r.fail("metadata '" + r.key("expert_weights_scale") + "' = " + std::to_string(scale) + " must be finite and >= 0");
  }
  m.scale = scale == 0.0 ? 1.f : static_cast<float>(scale);
}

// general.architecture (which also fixes the RoPE style) and general.name.
void read_architecture(const ModelFile& file, const ConfigReader& base, ModelConfig& c) {
  c.arch_name = base.guarded([&] { return file.meta.get_string("general.architecture"); });
  if (c.arch_name == "llama") {
    c.arch = Arch::Llama;
    c.rope_style = RopeStyle::Adjacent;
  } else if (c.arch_name == "qwen2" || c.arch_name == "qwen2moe" || c.arch_name == "qwen3moe") {
    c.arch = c.arch_name == "qwen2" ? Arch::Qwen2 : c.arch_name == "qwen2moe" ? Arch::Qwen2Moe : Arch::Qwen3Moe;
    c.rope_style = RopeStyle::Neox;
    c.qk_norm = c.arch == Arch::Qwen3Moe;
  } else if (c.arch_name == "qwen3") {  // qwen2 without biases, with per-head q/k RMSNorm
    c.arch = Arch::Qwen3;
    c.rope_style = RopeStyle::Neox;
    c.qk_norm = true;
  } else if (c.arch_name == "phi3") {  // fused QKV and gate/up; llama.cpp rotates phi3 NEOX-style
    c.arch = Arch::Phi3;
    c.rope_style = RopeStyle::Neox;
    c.fused_gate_up = true;
  } else if (c.arch_name == "gemma2" || c.arch_name == "gemma3") {
    c.arch = c.arch_name == "gemma2" ? Arch::Gemma2 : Arch::Gemma3;
    c.rope_style = RopeStyle::Neox;
    c.qk_norm = c.arch == Arch::Gemma3;
  } else {
    std::string list;
    for (auto a : kSupportedArchitectures) list += (list.empty() ? "" : ", ") + std::string(a);
    base.fail("unsupported architecture '" + c.arch_name + "' (supported: " + list + ")");
  }
  c.name = base.guarded([&] { return file.meta.get_string_opt("general.name"); }).value_or("");
}

// Widths, depth, heads (query, KV, their dimension), context and rotated dimensions.
void read_dimensions(const ModelFile& file, const ConfigReader& r, ModelConfig& c) {
  c.dim = r.required_int("embedding_length", 1, kMaxDim);
  c.n_layers = r.required_int("block_count", 1, kMaxLayers);
  c.ffn_dim = r.required_int("feed_forward_length", 1, kMaxFfnDim);
  c.n_heads = r.required_int("attention.head_count", 1, kMaxHeads);
  c.n_kv_heads = r.optional_int("attention.head_count_kv", c.n_heads, 1, kMaxHeads);
  if (c.n_heads % c.n_kv_heads != 0) {
    r.fail("attention.head_count (" + std::to_string(c.n_heads) + ") is not a multiple of attention.head_count_kv (" +
           std::to_string(c.n_kv_heads) + ")");
  }
  if (!file.meta.contains(r.key("attention.key_length")) && c.dim % c.n_heads != 0) {
    r.fail("embedding_length (" + std::to_string(c.dim) + ") is not a multiple of head_count (" +
           std::to_string(c.n_heads) + ") and attention.key_length is absent");
  }
  c.head_dim = r.optional_int("attention.key_length", c.dim / c.n_heads, 1, kMaxHeadDim);
  if (c.head_dim % 2 != 0) r.fail("head dimension " + std::to_string(c.head_dim) + " is odd");
  if (auto vlen = r.optional_int("attention.value_length", c.head_dim, 1, kMaxHeadDim); vlen != c.head_dim) {
    r.fail("attention.value_length (" + std::to_string(vlen) + ") differs from key_length (" +
           std::to_string(c.head_dim) + "); not supported");
  }
  c.context_length = r.required_int("context_length", 1, kMaxContext);
  read_moe(file, r, c);
  c.rope_dim = r.optional_int("rope.dimension_count", c.head_dim, 2, c.head_dim);
  if (c.rope_dim % 2 != 0) r.fail("rope.dimension_count " + std::to_string(c.rope_dim) + " is odd");
}

// The RMSNorm epsilon, the RoPE base frequency and linear RoPE scaling.
void read_norm_and_rope(const ConfigReader& r, ModelConfig& c) {
  auto eps = r.optional_float("attention.layer_norm_rms_epsilon");
  if (!eps) r.fail("missing metadata key '" + r.key("attention.layer_norm_rms_epsilon") + "'");
  if (!(*eps > 0.0 && *eps < 1.0)) {
    r.fail("attention.layer_norm_rms_epsilon = " + std::to_string(*eps) + " is not in (0, 1)");
  }
  c.rms_eps = static_cast<float>(*eps);

  double freq_base = r.optional_float("rope.freq_base").value_or(10000.0);
  if (!(freq_base > 1.0 && std::isfinite(freq_base))) {
    r.fail("rope.freq_base = " + std::to_string(freq_base) + " must be a finite number > 1");
  }
  c.rope_freq_base = static_cast<float>(freq_base);

  std::string scaling = r.optional_string("rope.scaling.type").value_or("none");
  auto factor = r.optional_float("rope.scaling.factor");
  if (scaling == "linear") {
    if (!factor) r.fail("rope.scaling.type is 'linear' but rope.scaling.factor is missing");
    if (!(*factor > 0.0 && std::isfinite(*factor))) {
      r.fail("rope.scaling.factor = " + std::to_string(*factor) + " must be finite and > 0");
    }
    c.rope_freq_scale = static_cast<float>(1.0 / *factor);
  } else if (scaling != "none" && scaling != "llama3") {
    // llama3 scaling lives in rope_freqs.weight, read in read_tensor_facts; yarn etc. are not implemented.
    r.fail("unsupported rope.scaling.type '" + scaling + "' (supported: none, linear, llama3)");
  }
}

// What the tensors say: vocabulary size, tied head, QKV bias, the query projection's shape
// (catches a wrong key_length / head_count early) and Llama 3.1's RoPE frequency factors.
void read_tensor_facts(const ModelFile& file, const ConfigReader& base, ModelConfig& c) {
  auto require = [&](std::string_view name) -> const TensorView& {
    return base.guarded([&]() -> const TensorView& { return file.require(name); });
  };
  // token_embd.weight is {dim, n_vocab}.
  const TensorView& embd = require("token_embd.weight");
  if (embd.shape.size() != 2 || embd.shape[0] != c.dim) {
    base.fail("tensor '" + file.name_in_file("token_embd.weight") + "' has shape " +
              file.shape_in_file("token_embd.weight", embd.shape) + ", expected " +
              file.shape_in_file("token_embd.weight", std::vector<std::string>{std::to_string(c.dim), "n_vocab"}));
  }
  c.n_vocab = embd.shape[1];
  if (c.n_vocab < 1 || c.n_vocab > kMaxVocab) {
    base.fail("vocabulary size " + std::to_string(c.n_vocab) + " from token_embd.weight is out of range");
  }
  c.tied_output = file.find("output.weight") == nullptr;
  c.qkv_bias = file.find("blk.0.attn_q.bias") != nullptr;

  // attn_q.weight is {dim, n_heads * head_dim}; phi3's fused attn_qkv.weight {dim, q_dim + 2 kv_dim}.
  c.fused_qkv = c.arch == Arch::Phi3 && file.find("blk.0.attn_qkv.weight") != nullptr;
  const char* q_name = c.fused_qkv ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight";
  const int64_t q_rows = c.fused_qkv ? c.q_dim() + 2 * c.kv_dim() : c.q_dim();
  const TensorView& wq = require(q_name);
  if (wq.shape.size() != 2 || wq.shape[0] != c.dim || wq.shape[1] != q_rows) {
    base.fail("tensor '" + file.name_in_file(q_name) + "' has shape " + file.shape_in_file(q_name, wq.shape) +
              ", expected " + file.shape_in_file(q_name, std::vector<int64_t>{c.dim, q_rows}) + " (head_count " +
              std::to_string(c.n_heads) + " x head_dim " + std::to_string(c.head_dim) +
              (c.fused_qkv ? ", then K and V" : "") + ")");
  }

  // rope_freqs.weight is {rope_dim / 2}: one divisor per rotated pair (Llama 3.1 scaling).
  if (const TensorView* ff = file.find("rope_freqs.weight")) {
    if (ff->type != TensorType::F32 || ff->shape.size() != 1 || ff->shape[0] != c.rope_dim / 2) {
      base.fail("tensor 'rope_freqs.weight' must be f32 of shape [" + std::to_string(c.rope_dim / 2) + "], got " +
                std::string(tensor_type_name(ff->type)) + " " + shape_string(ff->shape));
    }
    c.rope_freq_factors.resize(static_cast<size_t>(c.rope_dim / 2));
    ff->dequantize_row_to(0, c.rope_freq_factors);
    for (float f : c.rope_freq_factors) {
      if (!(f > 0.f && std::isfinite(f))) base.fail("tensor 'rope_freqs.weight' holds a non-positive factor");
    }
  }
}

// The sliding window and which layers use it. Mistral (llama) has the key only in files peregrine
// writes: llama.cpp's converter does not write it for llama and llama.cpp does not read it there
// (it attends to the whole context), so a llama file without it is global. Gemma 2 defaults to
// 4096 as llama.cpp does; Gemma 3 requires it. Gemma interleaves: gemma2 every other layer slides
// (0, 2, ...), gemma3 five of six (layer l slides iff l % 6 < 5).
void read_sliding_window(const ConfigReader& r, ModelConfig& c) {
  const bool gemma = c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3;
  if (c.arch == Arch::Gemma3 && !r.has("attention.sliding_window")) {
    r.fail("missing metadata key '" + r.key("attention.sliding_window") + "'");
  }
  // Phi-3's window is read by read_phi3: it caps the context (llama.cpp runs phi3 without one).
  if (c.arch == Arch::Phi3) return;
  if (!gemma && c.arch != Arch::Llama) {
    if (r.has("attention.sliding_window")) {
      r.fail("metadata '" + r.key("attention.sliding_window") + "': sliding-window attention is not supported for " +
             c.arch_name);
    }
    return;
  }
  c.sliding_window = r.optional_int("attention.sliding_window", c.arch == Arch::Gemma2 ? 4096 : 0, 0, kMaxContext);
  if (gemma) c.sliding_pattern = c.arch == Arch::Gemma2 ? 2 : 6;
  if (r.has("attention.sliding_window_pattern")) {
    r.fail("metadata '" + r.key("attention.sliding_window_pattern") +
           "' is not supported (the layer pattern is the "
           "architecture's own)");
  }
}

// Gemma 2 / 3: scaled embeddings, GeGLU, post-norms, soft-capping, the query scale and Gemma 3's
// local RoPE, all as llama.cpp's gemma2/gemma3 graphs have them. The RMSNorm gains need no +1:
// llama.cpp's converter adds it to every `*norm.weight` when it writes the GGUF.
void read_gemma(const ConfigReader& r, ModelConfig& c) {
  if (c.arch != Arch::Gemma2 && c.arch != Arch::Gemma3) return;
  c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  c.gelu_ffn = true;
  c.post_norms = true;
  auto softcap = [&](std::string_view key, double fallback) {
    const double v = r.optional_float(key).value_or(fallback);
    if (!(std::isfinite(v) && v >= 0.0)) r.fail("metadata '" + r.key(key) + "' must be finite and >= 0");
    return static_cast<float>(v);
  };
  if (c.arch == Arch::Gemma2) {  // llama.cpp's defaults when the keys are absent: 50 and 30
    c.attn_softcap = softcap("attn_logit_softcapping", 50.0);
    c.final_softcap = softcap("final_logit_softcapping", 30.0);
  } else {
    // llama.cpp's gemma3 graph (interleaved window) applies neither cap.
    if (r.has("attn_logit_softcapping") || r.has("final_logit_softcapping")) {
      r.fail("metadata '" + r.key("*_logit_softcapping") + "': soft-capping is not supported for gemma3");
    }
    c.rope_freq_base_swa = 10000.f;
  }
  // Gemma's query_pre_attn_scalar has no GGUF key: llama.cpp scales queries by 1/sqrt(head_dim),
  // except for the 27B models (46 layers gemma2, 62 gemma3), where it is 1/sqrt(dim / n_heads).
  const bool is_27b = (c.arch == Arch::Gemma2 && c.n_layers == 46) || (c.arch == Arch::Gemma3 && c.n_layers == 62);
  if (is_27b) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
}

// Phi-3: LongRoPE (the 128k variants' rope_factors_long/short, chosen by context length and paired
// with an attention factor) is not implemented, so it is refused by name rather than run as plain
// RoPE. The sliding window (Phi-3 mini 4k: 2047) caps the context where attention is exact rather
// than being applied as sliding-window attention: llama.cpp's phi3 loader turns the window off
// ("Phi SWA is currently disabled", llama.cpp PR 13676) and runs full attention past it, while
// Hugging Face's Phi-3 slides; within the window all of them compute the same thing.
void read_phi3(const ModelFile& file, const ConfigReader& r, ModelConfig& c) {
  if (c.is_moe()) r.fail("experts in a phi3 file are not supported (PhiMoE is architecture 'phimoe')");
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (file.find(name)) {
      r.fail("tensor '" + std::string(name) + "': LongRoPE (Phi-3 128k variants) is not supported");
    }
  }
  if (r.has("rope.scaling.attn_factor")) {
    r.fail("metadata '" + r.key("rope.scaling.attn_factor") + "': LongRoPE (Phi-3 128k variants) is not supported");
  }
  const int64_t window = r.optional_int("attention.sliding_window", 0, 0, kMaxContext);
  if (window > 0) c.context_length = std::min(c.context_length, window);
}

}  // namespace

std::span<const std::string_view> supported_architectures() { return kSupportedArchitectures; }

ModelConfig ModelConfig::from_model_file(const ModelFile& file) {
  ModelConfig c;
  const ConfigReader base(file, "general");
  read_architecture(file, base, c);
  const ConfigReader r(file, c.arch_name);
  read_dimensions(file, r, c);
  read_norm_and_rope(r, c);
  read_sliding_window(r, c);
  read_gemma(r, c);
  read_tensor_facts(file, base, c);
  if (c.arch == Arch::Phi3) read_phi3(file, r, c);
  return c;
}

}  // namespace peregrine
