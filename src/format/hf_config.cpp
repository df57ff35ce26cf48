#include "format/hf_config.h"

#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "format/json_file.h"
#include "format/rope_scaling.h"
#include "util/error.h"

namespace peregrine {
namespace {

using nlohmann::json;

constexpr size_t kMaxConfigBytes = size_t{16} << 20;
// Far above any real model, far below what would overflow a size computation.
constexpr int64_t kMaxDim = 1 << 17, kMaxLayers = 1024, kMaxHeads = 1024, kMaxFfn = 1 << 20,
                  kMaxVocab = int64_t{1} << 24, kMaxContext = int64_t{1} << 24;

class ConfigJson {
 public:
  ConfigJson(json j, std::string file) : j_(std::move(j)), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const { throw FormatError(file_ + ": " + what); }
  bool has(std::string_view key) const { return j_.contains(key) && !j_[std::string(key)].is_null(); }
  const json& at(std::string_view key) const { return j_[std::string(key)]; }

  int64_t integer(std::string_view key, int64_t lo, int64_t hi, std::optional<int64_t> fallback = {}) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail("missing key '" + std::string(key) + "'");
    }
    const json& v = at(key);
    if (!v.is_number_integer()) fail("'" + std::string(key) + "' is not an integer");
    const auto x = v.get<int64_t>();
    if (x < lo || x > hi) {
      fail("'" + std::string(key) + "' = " + std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    }
    return x;
  }
  double number(std::string_view key, std::optional<double> fallback = {}) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail("missing key '" + std::string(key) + "'");
    }
    if (!at(key).is_number()) fail("'" + std::string(key) + "' is not a number");
    const double x = at(key).get<double>();
    if (!std::isfinite(x)) fail("'" + std::string(key) + "' is not finite");
    return x;
  }
  bool boolean(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) fail("'" + std::string(key) + "' is not true or false");
    return at(key).get<bool>();
  }
  std::optional<std::string> string(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    if (!at(key).is_string()) fail("'" + std::string(key) + "' is not a string");
    return at(key).get<std::string>();
  }

 private:
  json j_;
  std::string file_;
};

struct ArchInfo {
  std::string_view hf;
  std::string_view gguf;
  bool permute_qk;
  bool qkv_bias;
};
constexpr ArchInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama", true, false},
    {"MistralForCausalLM", "llama", true, false},
    {"Qwen2ForCausalLM", "qwen2", false, true},
    {"Qwen3ForCausalLM", "qwen3", false, false},  // q/k norms; rotate_half, as GGUF qwen3 (NEOX)
    {"Phi3ForCausalLM", "phi3", false, false},    // fused qkv_proj / gate_up_proj; rotate_half (NEOX)
    {"Gemma2ForCausalLM", "gemma2", false, false},
    {"Gemma3ForCausalLM", "gemma3", false, false},
};

const ArchInfo& find_architecture(const ConfigJson& c) {
  if (!c.has("architectures") || !c.at("architectures").is_array() || c.at("architectures").empty() ||
      !c.at("architectures")[0].is_string()) {
    c.fail("missing key 'architectures' (a list naming the model class)");
  }
  const std::string name = c.at("architectures")[0].get<std::string>();
  for (const ArchInfo& a : kArchitectures) {
    if (a.hf == name) return a;
  }
  std::string list;
  for (const ArchInfo& a : kArchitectures) list += (list.empty() ? "" : ", ") + std::string(a.hf);
  c.fail("architecture '" + name + "' is not supported (supported: " + list + ")");
}

Llama3RopeScaling llama3_scaling(const ConfigJson& scaling) {
  Llama3RopeScaling s{scaling.number("factor", 8.0), scaling.number("low_freq_factor", 1.0),
                      scaling.number("high_freq_factor", 4.0), scaling.number("original_max_position_embeddings", 8192.0)};
  if (!(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor && s.original_context > 0)) {
    scaling.fail("rope_scaling (llama3) needs factor > 0 and high_freq_factor > low_freq_factor > 0");
  }
  return s;
}

void read_rope_scaling(const ConfigJson& c, HfModelConfig& out, double theta, const std::string& file) {
  if (!c.has("rope_scaling")) return;
  const json& rs = c.at("rope_scaling");
  if (!rs.is_object()) c.fail("'rope_scaling' is not an object");
  const ConfigJson scaling(rs, file + " (rope_scaling)");
  const std::string type = scaling.string("rope_type").value_or(scaling.string("type").value_or(""));
  const std::string k = out.arch + ".";
  if (type == "linear") {
    const double factor = scaling.number("factor");
    if (!(factor > 0)) scaling.fail("'factor' must be > 0");
    out.meta.set(k + "rope.scaling.type", MetaValue::string("linear"));
    out.meta.set(k + "rope.scaling.factor", MetaValue::f32(static_cast<float>(factor)));
  } else if (type == "llama3") {
    out.rope_freq_factors = llama3_rope_factors(out.head_dim, theta, llama3_scaling(scaling));
  } else if (type != "default") {
    c.fail("rope_scaling type '" + type + "' is not supported (supported: linear, llama3)");
  }
}

// Gemma 2 / 3: what llama.cpp's converter writes (sliding window, gemma2's soft-caps), and the
// settings GGUF has no key for, which must be the ones llama.cpp assumes: query_pre_attn_scalar
// (head_dim; dim / heads for the 27B models), gemma3's local RoPE base 10000 and 5:1 pattern.
void read_gemma(const ConfigJson& c, HfModelConfig& out) {
  const std::string k = out.arch + ".";
  Metadata& m = out.meta;
  const bool gemma2 = out.arch == "gemma2";
  if (gemma2 || c.has("sliding_window")) {
    m.set(k + "attention.sliding_window",
          MetaValue::u32(static_cast<uint32_t>(c.integer("sliding_window", 1, kMaxContext, 4096))));
  } else {
    c.fail("missing key 'sliding_window'");
  }
  for (const char* cap : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (!c.has(cap)) continue;
    if (!gemma2) c.fail("'" + std::string(cap) + "' is set: gemma3 has no soft-capping in llama.cpp's graph");
    const double v = c.number(cap);
    if (!(v > 0)) c.fail("'" + std::string(cap) + "' must be > 0");
    m.set(k + cap, MetaValue::f32(static_cast<float>(v)));
  }
  const bool is_27b = out.n_layers == (gemma2 ? 46 : 62);
  const int64_t scalar = is_27b ? out.dim / out.n_heads : out.head_dim;
  if (c.number("query_pre_attn_scalar", static_cast<double>(scalar)) != static_cast<double>(scalar)) {
    c.fail("'query_pre_attn_scalar' is not " + std::to_string(scalar) + ", the value llama.cpp assumes for this shape");
  }
  if (!gemma2) {
    if (c.number("rope_local_base_freq", 10000.0) != 10000.0) c.fail("'rope_local_base_freq' must be 10000");
    if (c.integer("sliding_window_pattern", 1, kMaxLayers, 6) != 6) c.fail("'sliding_window_pattern' must be 6");
  }
  out.norm_plus_one = true;
}

// Phi-3: a partial rotary factor (Phi-4-mini) is refused; the sliding window goes to metadata as
// llama.cpp's converter writes it (model/config.cpp caps the context there).
void read_phi3(const ConfigJson& c, HfModelConfig& out) {
  if (c.has("partial_rotary_factor") && c.number("partial_rotary_factor") != 1.0) {
    c.fail("'partial_rotary_factor' is not 1: partial rotary embeddings are not supported for Phi3ForCausalLM");
  }
  if (c.has("sliding_window")) {
    out.meta.set("phi3.attention.sliding_window",
                 MetaValue::u32(static_cast<uint32_t>(c.integer("sliding_window", 1, kMaxContext))));
  }
}

HfModelConfig read_config(const std::filesystem::path& config_json, const std::string& name) {
  const std::string file = config_json.string();
  const ConfigJson c(read_json_file(config_json, kMaxConfigBytes), file);
  const ArchInfo& arch = find_architecture(c);
  HfModelConfig out;
  out.hf_architecture = arch.hf;
  out.arch = arch.gguf;
  out.permute_qk = arch.permute_qk;
  out.dim = c.integer("hidden_size", 1, kMaxDim);
  out.n_layers = c.integer("num_hidden_layers", 1, kMaxLayers);
  out.n_heads = c.integer("num_attention_heads", 1, kMaxHeads);
  out.n_kv_heads = c.integer("num_key_value_heads", 1, kMaxHeads, out.n_heads);
  if (out.n_heads % out.n_kv_heads != 0) c.fail("'num_attention_heads' is not a multiple of 'num_key_value_heads'");
  if (!c.has("head_dim") && out.dim % out.n_heads != 0) c.fail("'hidden_size' is not a multiple of 'num_attention_heads'");
  out.head_dim = c.integer("head_dim", 2, kMaxDim, out.dim / out.n_heads);
  if (out.head_dim % 2 != 0) c.fail("head dimension " + std::to_string(out.head_dim) + " is odd");
  out.ffn_dim = c.integer("intermediate_size", 1, kMaxFfn);
  out.vocab_size = c.integer("vocab_size", 1, kMaxVocab);
  int64_t context = c.integer("max_position_embeddings", 1, kMaxContext);
  const double eps = c.number("rms_norm_eps");
  if (!(eps > 0 && eps < 1)) c.fail("'rms_norm_eps' must be in (0, 1)");
  const double theta = c.number("rope_theta", 10000.0);
  if (!(theta > 1)) c.fail("'rope_theta' must be > 1");
  const bool gemma = out.arch == "gemma2" || out.arch == "gemma3";
  out.tied_embeddings = c.boolean("tie_word_embeddings", gemma);
  out.qkv_bias = arch.qkv_bias || c.boolean("attention_bias", false);
  if (c.boolean("mlp_bias", false)) c.fail("'mlp_bias' is true: MLP biases are not supported");
  const std::string activation = gemma ? "gelu_pytorch_tanh" : "silu";  // SwiGLU; Gemma's GeGLU
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (const auto act = c.string(key); act && *act != activation) {
      c.fail("'" + std::string(key) + "' is '" + *act + "': only " + activation + " is supported here");
    }
  }
  if ((out.arch == "qwen2" || out.arch == "qwen3") && c.boolean("use_sliding_window", false)) {
    c.fail("'use_sliding_window' is true: sliding-window attention is not supported");
  }
  // Mistral's sliding window (v0.1: 4096 of 32768): every layer attends to the last `window`
  // positions, written as llama.attention.sliding_window (peregrine's key; llama.cpp ignores a
  // window for llama and attends to everything, so its results differ past the window).
  int64_t window = 0;
  if (out.arch == "llama" && c.has("sliding_window")) window = c.integer("sliding_window", 1, kMaxContext);

  Metadata& m = out.meta;
  const std::string k = out.arch + ".";
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  m.set("general.architecture", MetaValue::string(out.arch));
  m.set("general.name", MetaValue::string(name));
  m.set(k + "vocab_size", u32(out.vocab_size));
  m.set(k + "context_length", u32(context));
  m.set(k + "embedding_length", u32(out.dim));
  m.set(k + "feed_forward_length", u32(out.ffn_dim));
  m.set(k + "block_count", u32(out.n_layers));
  m.set(k + "attention.head_count", u32(out.n_heads));
  m.set(k + "attention.head_count_kv", u32(out.n_kv_heads));
  m.set(k + "attention.layer_norm_rms_epsilon", MetaValue::f32(static_cast<float>(eps)));
  m.set(k + "rope.freq_base", MetaValue::f32(static_cast<float>(theta)));
  m.set(k + "rope.dimension_count", u32(out.head_dim));
  if (window > 0 && window < context) m.set(k + "attention.sliding_window", u32(window));
  if (out.head_dim * out.n_heads != out.dim) {
    m.set(k + "attention.key_length", u32(out.head_dim));
    m.set(k + "attention.value_length", u32(out.head_dim));
  }
  read_rope_scaling(c, out, theta, file);
  if (gemma) read_gemma(c, out);
  if (out.arch == "phi3") read_phi3(c, out);
  return out;
}

}  // namespace

HfModelConfig read_hf_config(const std::filesystem::path& config_json, const std::string& name) {
  try {
    return read_config(config_json, name);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(config_json.string() + ": unexpected structure: " + e.what());
  }
}

}  // namespace peregrine
