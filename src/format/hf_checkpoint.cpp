#include "format/hf_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "format/hf_config.h"
#include "format/hf_tokenizer.h"
#include "format/safetensors.h"
#include "util/error.h"

namespace peregrine {
namespace {

// Keeps the mappings and the buffers of copied tensors alive for the views (a deque never
// moves its elements, so views into earlier buffers stay valid while later ones are added).
struct HfStorage {
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  std::deque<std::vector<std::byte>> buffers;
};

struct LayerRule {
  std::string_view hf;
  std::string_view gguf;
};
constexpr LayerRule kLayerTensors[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},  // Qwen3
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},  // Phi-3: rows q | k | v
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},      // Phi-3: rows gate | up
};

// Gemma's layers: four norms per layer (post_attention_layernorm is the attention's post-norm,
// not the feed-forward's input norm as in llama) and gemma3's q/k norms; searched first.
constexpr LayerRule kGemmaLayerTensors[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
};

// The GGUF name of an HF tensor; nullopt for one that is not part of the model.
std::optional<std::string> gguf_name(std::string_view hf, int64_t n_layers, bool gemma) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  constexpr std::string_view kPrefix = "model.layers.";
  if (!hf.starts_with(kPrefix)) return std::nullopt;
  hf.remove_prefix(kPrefix.size());
  int64_t layer = -1;
  const auto [end, ec] = std::from_chars(hf.data(), hf.data() + hf.size(), layer);
  if (ec != std::errc() || end == hf.data() || *end != '.' || layer < 0 || layer >= n_layers) return std::nullopt;
  if (hf[0] == '0' && end - hf.data() > 1) return std::nullopt;  // "01" is not layer 1
  const std::string_view rest = hf.substr(static_cast<size_t>(end - hf.data()) + 1);
  for (const LayerRule& r : kGemmaLayerTensors) {
    if (gemma && r.hf == rest) return "blk." + std::to_string(layer) + "." + std::string(r.gguf);
  }
  for (const LayerRule& r : kLayerTensors) {
    if (r.hf == rest) return "blk." + std::to_string(layer) + "." + std::string(r.gguf);
  }
  return std::nullopt;
}

// llama.cpp's permute for HF llama Q/K: within each head, rows [2][d/2] become [d/2][2], so
// rows i and i + d/2 (the pair HF's rotate_half rotates) become the adjacent rows 2i and 2i+1.
void permute_rows(std::span<const std::byte> src, std::span<std::byte> dst, int64_t n_head, size_t row_bytes) {
  const size_t rows = src.size() / row_bytes;
  const size_t head_rows = rows / static_cast<size_t>(n_head), half = head_rows / 2;
  for (size_t h = 0; h < static_cast<size_t>(n_head); ++h) {
    for (size_t i = 0; i < half; ++i) {
      for (size_t j = 0; j < 2; ++j) {
        const size_t from = h * head_rows + j * half + i, to = h * head_rows + 2 * i + j;
        std::memcpy(dst.data() + to * row_bytes, src.data() + from * row_bytes, row_bytes);
      }
    }
  }
}

class Converter {
 public:
  Converter(const HfModelConfig& cfg, HfStorage& storage) : cfg_(cfg), storage_(storage) {}

  TensorView convert(const SafetensorsTensor& t, const std::string& file, std::string name) {
    for (int64_t d : t.shape) {
      if (d < 1) throw FormatError(file + ": tensor '" + t.name + "' has an empty dimension");
    }
    TensorView v{std::move(name), t.type, {t.shape.rbegin(), t.shape.rend()}, t.data};
    const bool is_q = v.name.find(".attn_q.") != std::string::npos, is_k = v.name.find(".attn_k.") != std::string::npos;
    // Gemma's norm gains become w + 1, as llama.cpp's converter writes them.
    if (v.shape.size() == 1) widen_to_f32(v, cfg_.norm_plus_one && v.name.ends_with("norm.weight") ? 1.f : 0.f);
    if (cfg_.permute_qk && (is_q || is_k)) permute(v, t, file, is_q ? cfg_.n_heads : cfg_.n_kv_heads);
    const size_t elem = tensor_type_info(v.type).block_bytes;
    if (reinterpret_cast<uintptr_t>(v.data.data()) % elem != 0) v.data = copy(v.data);
    return v;
  }

  // A buffer the ModelFile owns.
  std::span<std::byte> buffer(size_t bytes) { return storage_.buffers.emplace_back(bytes); }

 private:
  std::span<const std::byte> copy(std::span<const std::byte> data) {
    std::span<std::byte> out = buffer(data.size());
    std::memcpy(out.data(), data.data(), data.size());
    return out;
  }

  // A 1-D tensor as f32, plus `add` on every element.
  void widen_to_f32(TensorView& v, float add) {
    const int64_t n = v.shape[0];
    std::span<std::byte> out = buffer(static_cast<size_t>(n) * 4);
    auto* values = reinterpret_cast<float*>(out.data());
    dequantize_row(v.type, v.data.data(), values, n);
    if (add != 0.f) {
      for (int64_t i = 0; i < n; ++i) values[i] += add;
    }
    v.type = TensorType::F32;
    v.data = out;
  }

  void permute(TensorView& v, const SafetensorsTensor& t, const std::string& file, int64_t n_head) {
    const int64_t rows = v.shape.back();
    if (rows != n_head * cfg_.head_dim) {
      throw FormatError(file + ": tensor '" + t.name + "' has " + std::to_string(rows) + " rows, expected " +
                        std::to_string(n_head) + " heads x " + std::to_string(cfg_.head_dim));
    }
    const size_t row_bytes = v.data.size() / static_cast<size_t>(rows);
    std::span<std::byte> out = buffer(v.data.size());
    permute_rows(v.data, out, n_head, row_bytes);
    v.data = out;
  }

  const HfModelConfig& cfg_;
  HfStorage& storage_;
};

std::vector<SafetensorsFile> open_weights(const std::filesystem::path& dir) {
  const auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index)) return read_safetensors_index(index);
  const auto single = dir / "model.safetensors";
  if (std::filesystem::exists(single)) {
    std::vector<SafetensorsFile> files;
    files.push_back(read_safetensors(single));
    return files;
  }
  throw FormatError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
}

// token_embd, rope_freqs, blk.0.* ... blk.N.*, output_norm, output: the order llama.cpp writes.
std::pair<int, int64_t> tensor_order(const std::string& name) {
  if (name.starts_with("token_embd.")) return {0, 0};
  if (name.starts_with("rope_freqs.")) return {1, 0};
  if (name.starts_with("blk.")) return {2, std::stoll(name.substr(4))};
  if (name.starts_with("output_norm.")) return {3, 0};
  return {4, 0};
}

}  // namespace

bool is_hf_checkpoint(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) && std::filesystem::is_regular_file(path / "config.json");
}

ModelFile read_hf_checkpoint(const std::filesystem::path& dir) {
  if (!is_hf_checkpoint(dir)) throw FormatError(dir.string() + ": not a Hugging Face checkpoint folder (no config.json)");
  const std::string name = std::filesystem::weakly_canonical(dir).filename().string();
  const HfModelConfig cfg = read_hf_config(dir / "config.json", name);
  auto storage = std::make_shared<HfStorage>();
  ModelFile mf;
  mf.path = dir.string();
  mf.gguf_version = 0;
  mf.meta = cfg.meta;
  Converter converter(cfg, *storage);

  std::map<std::string, std::string> origin;  // GGUF name -> file, to catch duplicates
  for (const SafetensorsFile& f : open_weights(dir)) {
    storage->mappings.push_back(f.mapping);
    for (const SafetensorsTensor& t : f.tensors) {
      if (t.name.ends_with(".rotary_emb.inv_freq")) continue;  // recomputed, as every loader does
      std::optional<std::string> gguf = gguf_name(t.name, cfg.n_layers, cfg.norm_plus_one);
      if (!gguf) {
        throw FormatError(f.path + ": tensor '" + t.name + "' is not part of a " + cfg.hf_architecture +
                          " checkpoint with " + std::to_string(cfg.n_layers) + " layers");
      }
      if (auto [it, fresh] = origin.emplace(*gguf, f.path); !fresh) {
        throw FormatError(f.path + ": tensor '" + t.name + "' is also in " + it->second);
      }
      mf.tensors.push_back(converter.convert(t, f.path, *gguf));
      mf.origins.emplace(*gguf, TensorOrigin{f.path, t.name});
    }
  }
  if (!mf.find("token_embd.weight")) throw FormatError(dir.string() + ": no tensor 'model.embed_tokens.weight'");
  if (!mf.find("output.weight") && !cfg.tied_embeddings) {
    throw FormatError(dir.string() + ": no tensor 'lm_head.weight', and config.json does not tie it to the embeddings");
  }
  if (!cfg.rope_freq_factors.empty()) {
    const size_t bytes = cfg.rope_freq_factors.size() * sizeof(float);
    std::span<std::byte> out = converter.buffer(bytes);
    std::memcpy(out.data(), cfg.rope_freq_factors.data(), bytes);
    mf.tensors.push_back({"rope_freqs.weight", TensorType::F32, {static_cast<int64_t>(cfg.rope_freq_factors.size())}, out});
  }
  std::stable_sort(mf.tensors.begin(), mf.tensors.end(),
                   [](const TensorView& a, const TensorView& b) { return tensor_order(a.name) < tensor_order(b.name); });
  mf.storage = std::move(storage);
  add_hf_tokenizer(mf.meta, dir, mf.require("token_embd.weight").shape[1]);
  return mf;
}

Metadata read_hf_tokenizer_only(const std::filesystem::path& dir) {
  Metadata meta;
  meta.set("general.name", MetaValue::string(std::filesystem::weakly_canonical(dir).filename().string()));
  add_hf_tokenizer(meta, dir);
  return meta;
}

}  // namespace peregrine
