// Quantization schemes: plain types and llama.cpp's per-tensor mixes (quant_scheme.h gives the
// rules as a table; the code below is that table).
#include "format/quant_scheme.h"

#include <array>
#include <cctype>
#include <cstdio>

#include "util/error.h"

namespace peregrine {
namespace {

struct MixName {
  QuantMix mix;
  std::string_view name;
  TensorType base;
  uint32_t file_type;  // llama_ftype
};
constexpr std::array<MixName, 4> kMixes = {{
    {QuantMix::Q2_K, "q2_k", TensorType::Q2_K, 10},      // MOSTLY_Q2_K
    {QuantMix::Q3_K_M, "q3_k_m", TensorType::Q3_K, 12},  // MOSTLY_Q3_K_M
    {QuantMix::Q4_K_M, "q4_k_m", TensorType::Q4_K, 15},  // MOSTLY_Q4_K_M
    {QuantMix::Q5_K_M, "q5_k_m", TensorType::Q5_K, 17},  // MOSTLY_Q5_K_M
}};

// Every type a plain name selects, in the order help texts list them (Q2_K's name is the mix's).
constexpr std::array<TensorType, 14> kPlainTypes = {
    TensorType::F32,  TensorType::F16,    TensorType::BF16,   TensorType::Q8_0, TensorType::Q6_K,
    TensorType::Q5_K, TensorType::Q5_1,   TensorType::Q5_0,   TensorType::Q4_K, TensorType::Q4_1,
    TensorType::Q4_0, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::Q3_K};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool contains(std::string_view name, std::string_view part) { return name.find(part) != std::string_view::npos; }

// The layer of a "blk.N." tensor, or -1.
int64_t layer_of(std::string_view name) {
  int layer = -1;
  const std::string s(name);
  if (std::sscanf(s.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The type before the fallback: the rules of quant_scheme.h's table.
TensorType mix_rule(const QuantScheme& s, const QuantModelInfo& m, std::string_view name) {
  const TensorType base = s.base;
  const int64_t layer = layer_of(name);
  const bool eight_experts = m.n_experts == 8;
  if (name == "output.weight" || (!m.has_output && name == "token_embd.weight")) return TensorType::Q6_K;
  if (contains(name, "attn_v.weight") || contains(name, "attn_qkv.weight")) {
    TensorType t = base;
    if (s.mix == QuantMix::Q2_K) t = m.n_gqa >= 4 ? TensorType::Q4_K : TensorType::Q3_K;
    if (s.mix == QuantMix::Q3_K_M) t = layer < 2 ? TensorType::Q5_K : TensorType::Q4_K;
    if ((s.mix == QuantMix::Q4_K_M || s.mix == QuantMix::Q5_K_M) && use_more_bits(layer, m.n_layers)) {
      t = TensorType::Q6_K;
    }
    return eight_experts ? TensorType::Q8_0 : t;
  }
  if (contains(name, "attn_k.weight")) return eight_experts ? TensorType::Q8_0 : base;
  if (contains(name, "ffn_down")) {
    switch (s.mix) {
      case QuantMix::Q2_K:
        return TensorType::Q3_K;
      case QuantMix::Q3_K_M:
        return layer < m.n_layers / 16 ? TensorType::Q5_K : TensorType::Q4_K;
      case QuantMix::Q4_K_M:
      case QuantMix::Q5_K_M:
        return use_more_bits(layer, m.n_layers) ? TensorType::Q6_K : base;
      case QuantMix::None:
        return base;
    }
  }
  if (contains(name, "attn_output.weight")) {
    if (eight_experts) return s.mix == QuantMix::Q5_K_M ? base : TensorType::Q5_K;
    if (s.mix == QuantMix::Q2_K) return TensorType::Q3_K;
    if (s.mix == QuantMix::Q3_K_M) return TensorType::Q4_K;
  }
  return base;
}

}  // namespace

std::optional<QuantScheme> parse_quant_scheme(std::string_view name) {
  const std::string n = lower(name);
  for (const MixName& m : kMixes) {
    if (n == m.name) return QuantScheme(m.base, m.mix);
  }
  if (auto t = parse_tensor_type(n)) return QuantScheme(*t);
  return std::nullopt;
}

std::string quant_scheme_name(const QuantScheme& scheme) {
  for (const MixName& m : kMixes) {
    if (scheme.mix == m.mix) return std::string(m.name);
  }
  return lower(tensor_type_name(scheme.base));
}

std::string quant_scheme_names() {
  std::string out;
  for (TensorType t : kPlainTypes) out += (out.empty() ? "" : ", ") + lower(tensor_type_name(t));
  for (const MixName& m : kMixes) out += ", " + std::string(m.name);
  return out;
}

uint32_t llama_file_type(const QuantScheme& scheme) {
  for (const MixName& m : kMixes) {
    if (scheme.mix == m.mix) return m.file_type;
  }
  switch (scheme.base) {
    case TensorType::F32:
      return 0;  // ALL_F32
    case TensorType::F16:
      return 1;  // MOSTLY_F16
    case TensorType::Q4_0:
      return 2;  // MOSTLY_Q4_0
    case TensorType::Q4_1:
      return 3;  // MOSTLY_Q4_1
    case TensorType::Q8_0:
      return 7;  // MOSTLY_Q8_0
    case TensorType::Q5_0:
      return 8;  // MOSTLY_Q5_0
    case TensorType::Q5_1:
      return 9;  // MOSTLY_Q5_1
    case TensorType::Q2_K:
      return 10;  // MOSTLY_Q2_K (the nearest: llama.cpp has no all-Q2_K type)
    case TensorType::Q3_K:
      return 11;  // MOSTLY_Q3_K_S
    case TensorType::Q4_K:
      return 14;  // MOSTLY_Q4_K_S
    case TensorType::Q5_K:
      return 16;  // MOSTLY_Q5_K_S
    case TensorType::Q6_K:
      return 18;  // MOSTLY_Q6_K
    case TensorType::IQ4_NL:
      return 25;  // MOSTLY_IQ4_NL
    case TensorType::IQ4_XS:
      return 30;  // MOSTLY_IQ4_XS
    case TensorType::BF16:
      return 32;  // MOSTLY_BF16
    case TensorType::Q4_0_X16:  // a kernel layout, never written to a file
    case TensorType::Q8_0_X16:
      break;
  }
  throw UsageError("no llama.cpp file type for tensor type " + std::to_string(static_cast<uint32_t>(scheme.base)));
}

QuantModelInfo quant_model_info(const Metadata& meta, bool has_output) {
  QuantModelInfo info;
  info.has_output = has_output;
  const std::string arch = meta.get_string_opt("general.architecture").value_or("llama");
  // A per-layer array (some models) has no single value: such keys count as absent here.
  const auto integer = [&](const std::string& key) -> std::optional<int64_t> {
    const MetaValue* v = meta.find(arch + "." + key);
    if (v == nullptr || !v->is_integer()) return std::nullopt;
    return v->as_int();
  };
  info.n_layers = integer("block_count").value_or(0);
  const int64_t heads = integer("attention.head_count").value_or(1);
  const int64_t kv_heads = integer("attention.head_count_kv").value_or(heads);
  info.n_gqa = kv_heads > 0 ? heads / kv_heads : 1;
  info.n_experts = integer("expert_count").value_or(0);
  return info;
}

bool is_quantizable_weight(std::string_view name, std::span<const int64_t> shape) {
  if (shape.size() < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  return !contains(name, "_norm.weight") && !contains(name, "ffn_gate_inp.weight");
}

TensorType mix_tensor_type(const QuantScheme& scheme, const QuantModelInfo& model, std::string_view name,
                           int64_t row_length) {
  const TensorType wanted = mix_rule(scheme, model, name);
  // The head's own rule: Q8_0 rather than Q6_K's fallback when its rows do not fit 256-blocks.
  if (wanted == TensorType::Q6_K && row_length % 256 != 0 &&
      (name == "output.weight" || (!model.has_output && name == "token_embd.weight"))) {
    return fallback_type(TensorType::Q8_0, row_length);
  }
  return fallback_type(wanted, row_length);
}

TensorType fallback_type(TensorType requested, int64_t row_length) {
  if (row_length % tensor_type_info(requested).block_elems == 0) return requested;
  TensorType t = TensorType::F16;
  switch (requested) {
    case TensorType::Q2_K:
    case TensorType::Q3_K:
      t = TensorType::Q4_0;
      break;
    case TensorType::Q4_K:
      t = TensorType::Q5_0;
      break;
    case TensorType::Q5_K:
      t = TensorType::Q5_1;
      break;
    case TensorType::Q6_K:
      t = TensorType::Q8_0;
      break;
    case TensorType::IQ4_XS:
      t = TensorType::IQ4_NL;
      break;
    default:
      break;
  }
  return row_length % tensor_type_info(t).block_elems == 0 ? t : TensorType::F16;
}

}  // namespace peregrine
