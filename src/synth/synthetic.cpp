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
constexpr std::array<std::string_view, 8> kPresetNames = {
    "stories15m", "stories110m", "tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b",
    "tiny-llama", "tiny-llama3", "tiny-qwen2"};

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

// general.file_type as llama.cpp's llama_ftype numbers it (the "mostly" type of the weights).
uint32_t llama_file_type(TensorType t) {
  switch (t) {
    case TensorType::F32: return 0;   // ALL_F32
    case TensorType::F16: return 1;   // MOSTLY_F16
    case TensorType::Q4_0: return 2;  // MOSTLY_Q4_0
    case TensorType::Q8_0: return 7;  // MOSTLY_Q8_0
    case TensorType::Q4_K: return 14; // MOSTLY_Q4_K_S (every matrix Q4_K)
    case TensorType::Q6_K: return 18; // MOSTLY_Q6_K
    case TensorType::BF16: return 32; // MOSTLY_BF16
  }
  throw UsageError("synthetic model: unsupported weight type");
}

// How a tensor's values are drawn.
enum class Fill {
  Matrix,      // N(0, 1) / sqrt(row length): keeps each matrix-vector product at unit scale
  NormWeight,  // 1 + 0.1 N(0, 1): near 1 like trained RMSNorm gains, but not trivially 1
  Bias,        // 0.5 N(0, 1): large enough that a path ignoring the bias fails the tests
  RopeFreqs,   // the Llama 3 factors (not random)
};

struct PlannedTensor {
  SyntheticTensor tensor;
  Fill fill;
};

std::vector<PlannedTensor> plan(const SyntheticSpec& s, TensorType weight_type) {
  const int64_t head_dim = s.head_dim();
  const int64_t q_dim = s.n_heads * head_dim;
  const int64_t kv_dim = s.n_kv_heads * head_dim;
  std::vector<PlannedTensor> out;
  auto matrix = [&](std::string name, int64_t n_in, int64_t n_out) {
    out.push_back({{std::move(name), synthetic_weight_type(weight_type, n_in), {n_in, n_out}}, Fill::Matrix});
  };
  auto vector = [&](std::string name, int64_t n, Fill fill) {
    out.push_back({{std::move(name), TensorType::F32, {n}}, fill});
  };

  matrix("token_embd.weight", s.dim, s.n_vocab);
  if (s.llama3_rope_freqs) vector("rope_freqs.weight", head_dim / 2, Fill::RopeFreqs);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vector(p + "attn_norm.weight", s.dim, Fill::NormWeight);
    matrix(p + "attn_q.weight", s.dim, q_dim);
    matrix(p + "attn_k.weight", s.dim, kv_dim);
    matrix(p + "attn_v.weight", s.dim, kv_dim);
    if (s.qkv_bias) {
      vector(p + "attn_q.bias", q_dim, Fill::Bias);
      vector(p + "attn_k.bias", kv_dim, Fill::Bias);
      vector(p + "attn_v.bias", kv_dim, Fill::Bias);
    }
    matrix(p + "attn_output.weight", q_dim, s.dim);
    vector(p + "ffn_norm.weight", s.dim, Fill::NormWeight);
    matrix(p + "ffn_gate.weight", s.dim, s.ffn_dim);
    matrix(p + "ffn_down.weight", s.ffn_dim, s.dim);
    matrix(p + "ffn_up.weight", s.dim, s.ffn_dim);
  }
  vector("output_norm.weight", s.dim, Fill::NormWeight);
  if (!s.tied_output) matrix("output.weight", s.dim, s.n_vocab);
  return out;
}

// Fills `dst` with the tensor's values, one row at a time (only one f32 row is ever held).
void produce(const PlannedTensor& pt, const SyntheticSpec& spec, uint64_t seed, std::span<std::byte> dst) {
  const SyntheticTensor& t = pt.tensor;
  const int64_t row_len = t.shape[0];
  const int64_t n_rows = t.shape.size() > 1 ? t.shape[1] : 1;
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

}  // namespace

std::span<const std::string_view> synthetic_preset_names() { return kPresetNames; }

std::optional<SyntheticSpec> synthetic_preset(std::string_view name) {
  if (name == "stories15m") return make_spec("llama", "stories15M", 288, 6, 6, 6, 768, 32000, 256);
  if (name == "stories110m") return make_spec("llama", "stories110M", 768, 12, 12, 12, 2048, 32000, 1024);
  if (name == "tinyllama-1.1b") return make_spec("llama", "TinyLlama-1.1B", 2048, 22, 32, 4, 5632, 32000, 2048);
  if (name == "llama-3.2-1b") {
    SyntheticSpec s = make_spec("llama", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, 131072);
    s.rope_freq_base = 500000.f;
    s.tied_output = true;
    s.llama3_rope_freqs = true;
    return s;
  }
  if (name == "qwen2.5-0.5b") {
    SyntheticSpec s = make_spec("qwen2", "Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, 32768);
    s.rope_freq_base = 1000000.f;
    s.tied_output = true;
    s.qkv_bias = true;
    s.rms_eps = 1e-6f;
    return s;
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
  return std::nullopt;
}

void validate_synthetic_spec(const SyntheticSpec& s) {
  auto fail = [&](const std::string& why) {
    throw UsageError("synthetic model '" + s.name + "': " + why);
  };
  if (s.arch != "llama" && s.arch != "qwen2") fail("unsupported architecture '" + s.arch + "' (llama, qwen2)");
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
  if (s.dim % s.n_heads != 0) fail("dim must be a multiple of n_heads");
  if (s.head_dim() % 2 != 0) fail("head_dim (dim / n_heads) must be even for RoPE");
  if (s.n_heads % s.n_kv_heads != 0) fail("n_heads must be a multiple of n_kv_heads");
  if (!(s.rms_eps > 0.f) || !(s.rope_freq_base > 1.f)) fail("rms_eps must be > 0 and rope_freq_base > 1");
}

TensorType synthetic_weight_type(TensorType requested, int64_t row_length) {
  const int64_t block = tensor_type_info(requested).block_elems;
  if (row_length % block == 0) return requested;
  // llama.cpp's quantizer does the same for rows that don't fit the super-blocks of a K-quant
  // (e.g. dim 288 or 896): it picks a 32-block type instead (it has Q5_0/Q5_1 for Q4_K; we
  // have neither, so Q8_0). A row that doesn't fit 32-blocks either stays F16.
  if (block == 256 && row_length % 32 == 0) return TensorType::Q8_0;
  return TensorType::F16;
}

std::vector<float> llama3_rope_freq_factors(int64_t rope_dim, float freq_base) {
  return llama3_rope_factors(rope_dim, freq_base, {.factor = 32.0});  // Llama 3.2 1B/3B
}

Metadata synthetic_metadata(const SyntheticSpec& s, TensorType weight_type) {
  validate_synthetic_spec(s);
  Metadata m;
  const std::string a = s.arch + ".";
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  m.set("general.architecture", MetaValue::string(s.arch));
  m.set("general.name", MetaValue::string(s.name));
  m.set("general.file_type", MetaValue::u32(llama_file_type(weight_type)));
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
  synth::add_synthetic_vocab_metadata(m, s.n_vocab);
  return m;
}

std::vector<SyntheticTensor> synthetic_tensor_plan(const SyntheticSpec& s, TensorType weight_type) {
  validate_synthetic_spec(s);
  std::vector<SyntheticTensor> out;
  for (PlannedTensor& p : plan(s, weight_type)) out.push_back(std::move(p.tensor));
  return out;
}

void write_synthetic_gguf(const SyntheticSpec& spec, TensorType weight_type, uint64_t seed,
                          const std::filesystem::path& out,
                          const std::function<void(uint64_t, uint64_t)>& progress) {
  GgufWriter writer(synthetic_metadata(spec, weight_type));
  for (PlannedTensor& p : plan(spec, weight_type)) {
    SyntheticTensor t = p.tensor;
    writer.add_tensor(std::move(t.name), t.type, std::move(t.shape),
                      [p, spec, seed](std::span<std::byte> dst) { produce(p, spec, seed, dst); });
  }
  writer.write(out, progress);
}

}  // namespace peregrine
