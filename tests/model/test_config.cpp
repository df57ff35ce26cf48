// ModelConfig::from_model_file on small hand-built files: defaults, derived facts, and every
// validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "model/config.h"
#include "util/error.h"

namespace peregrine {
namespace {

struct FileBuilder {
  std::string arch = "llama";
  int64_t dim = 64, layers = 2, ffn = 128, heads = 8, vocab = 100, ctx = 256;
  std::optional<int64_t> kv_heads, key_length, rope_dim;
  std::optional<std::string> scaling_type;
  std::optional<float> scaling_factor, freq_base;
  bool output = true, bias = false, eps = true;
  std::vector<float> rope_freqs;
  std::vector<int64_t> q_shape;  // default {dim, dim}
  std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;
  std::vector<std::pair<std::string, uint32_t>> extra_keys;  // <arch>.KEY = u32

  ModelFile build() const {
    ModelFile f;
    f.path = "test.gguf";
    f.meta.set("general.architecture", MetaValue::string(arch));
    f.meta.set("general.name", MetaValue::string("tiny"));
    const std::string a = arch + ".";
    f.meta.set(a + "embedding_length", MetaValue::u32(uint32_t(dim)));
    f.meta.set(a + "block_count", MetaValue::u32(uint32_t(layers)));
    f.meta.set(a + "feed_forward_length", MetaValue::u32(uint32_t(ffn)));
    f.meta.set(a + "attention.head_count", MetaValue::u32(uint32_t(heads)));
    f.meta.set(a + "context_length", MetaValue::u32(uint32_t(ctx)));
    if (eps) f.meta.set(a + "attention.layer_norm_rms_epsilon", MetaValue::f32(1e-6f));
    if (kv_heads) f.meta.set(a + "attention.head_count_kv", MetaValue::u32(uint32_t(*kv_heads)));
    if (key_length) f.meta.set(a + "attention.key_length", MetaValue::u32(uint32_t(*key_length)));
    if (rope_dim) f.meta.set(a + "rope.dimension_count", MetaValue::u32(uint32_t(*rope_dim)));
    if (freq_base) f.meta.set(a + "rope.freq_base", MetaValue::f32(*freq_base));
    if (scaling_type) f.meta.set(a + "rope.scaling.type", MetaValue::string(*scaling_type));
    if (scaling_factor) f.meta.set(a + "rope.scaling.factor", MetaValue::f32(*scaling_factor));

    auto storage = std::make_shared<std::vector<std::byte>>(1 << 20);
    auto add = [&](std::string name, std::vector<int64_t> shape) {
      TensorView t;
      t.name = std::move(name);
      t.shape = std::move(shape);
      t.data = std::span<const std::byte>(storage->data(), size_t(t.n_elements()) * 4);
      f.tensors.push_back(std::move(t));
    };
    add("token_embd.weight", {dim, vocab});
    add("blk.0.attn_q.weight", q_shape.empty() ? std::vector<int64_t>{dim, dim} : q_shape);
    if (bias) add("blk.0.attn_q.bias", {dim});
    if (output) add("output.weight", {dim, vocab});
    for (const auto& [name, shape] : extra_tensors) add(name, shape);
    for (const auto& [key, value] : extra_keys) f.meta.set(a + key, MetaValue::u32(value));
    if (!rope_freqs.empty()) {
      std::memcpy(storage->data() + 4096, rope_freqs.data(), rope_freqs.size() * 4);
      TensorView t;
      t.name = "rope_freqs.weight";
      t.shape = {int64_t(rope_freqs.size())};
      t.data = std::span<const std::byte>(storage->data() + 4096, rope_freqs.size() * 4);
      f.tensors.push_back(std::move(t));
    }
    f.storage = storage;
    return f;
  }
};

void expect_error(const FileBuilder& b, const std::string& needle) {
  try {
    ModelConfig::from_model_file(b.build());
    ADD_FAILURE() << "no FormatError; expected one mentioning '" << needle << "'";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("test.gguf: ", 0), 0u) << msg;
  }
}

TEST(ModelConfig, LlamaDefaults) {
  const ModelConfig c = ModelConfig::from_model_file(FileBuilder{}.build());
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.arch_name, "llama");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.n_vocab, 100);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.ffn_dim, 128);
  EXPECT_EQ(c.context_length, 256);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.f);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.f);
  EXPECT_EQ(c.rope_style, RopeStyle::Adjacent);
  EXPECT_TRUE(c.rope_freq_factors.empty());
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.gqa_group(), 1);
}

TEST(ModelConfig, Qwen2GqaTiedBiasScaledRope) {
  FileBuilder b;
  b.arch = "qwen2";
  b.kv_heads = 2;
  b.output = false;
  b.bias = true;
  b.freq_base = 1e6f;
  b.scaling_type = "linear";
  b.scaling_factor = 4.f;
  b.rope_dim = 4;
  b.rope_freqs = {1.f, 2.f};
  const ModelConfig c = ModelConfig::from_model_file(b.build());
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_EQ(c.rope_style, RopeStyle::Neox);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.gqa_group(), 4);
  EXPECT_EQ(c.kv_dim(), 16);
  EXPECT_TRUE(c.tied_output);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.25f);
  EXPECT_EQ(c.rope_dim, 4);
  EXPECT_EQ(c.rope_freq_factors, (std::vector<float>{1.f, 2.f}));
}

TEST(ModelConfig, ExplicitKeyLength) {
  FileBuilder b;
  b.key_length = 16;
  b.q_shape = {64, 128};
  const ModelConfig c = ModelConfig::from_model_file(b.build());
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_dim(), 128);
}

TEST(ModelConfig, Errors) {
  FileBuilder b;
  b.arch = "gpt2";
  expect_error(
      b, "unsupported architecture 'gpt2' (supported: llama, qwen2, qwen2moe, qwen3moe, qwen3, phi3, gemma2, gemma3)");
  b = {};
  b.kv_heads = 3;
  expect_error(b, "not a multiple of attention.head_count_kv");
  b = {};
  b.kv_heads = 0;
  expect_error(b, "head_count_kv");
  b = {};
  b.layers = 0;
  expect_error(b, "block_count");
  b = {};
  b.dim = 1 << 20;
  expect_error(b, "embedding_length");
  b = {};
  b.eps = false;
  expect_error(b, "layer_norm_rms_epsilon");
  b = {};
  b.key_length = 16;  // q weight still {64, 64}
  expect_error(b, "blk.0.attn_q.weight");
  b = {};
  b.heads = 7;  // 64 / 7 does not divide
  expect_error(b, "not a multiple of head_count");
  b = {};
  b.rope_dim = 16;  // > head_dim 8
  expect_error(b, "rope.dimension_count");
  b = {};
  b.scaling_type = "linear";
  expect_error(b, "rope.scaling.factor");
  b = {};
  b.scaling_type = "yarn";
  b.scaling_factor = 2.f;
  expect_error(b, "unsupported rope.scaling.type 'yarn'");
  b = {};
  b.rope_freqs = {1.f, 2.f, 3.f};  // rope_dim/2 is 4
  expect_error(b, "rope_freqs.weight");
  b = {};
  b.rope_freqs = {1.f, 0.f, 3.f, 4.f};
  expect_error(b, "rope_freqs.weight");
  b = {};
  b.freq_base = -1.f;
  expect_error(b, "rope.freq_base");
}

TEST(ModelConfig, MissingKeysAndTensors) {
  ModelFile f = FileBuilder{}.build();
  Metadata trimmed;
  for (const auto& [k, v] : f.meta.entries())
    if (k != "llama.feed_forward_length") trimmed.set(k, v);
  f.meta = trimmed;
  try {
    ModelConfig::from_model_file(f);
    ADD_FAILURE();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("llama.feed_forward_length"), std::string::npos) << e.what();
  }
  f = FileBuilder{}.build();
  std::erase_if(f.tensors, [](const TensorView& t) { return t.name == "token_embd.weight"; });
  EXPECT_THROW(ModelConfig::from_model_file(f), FormatError);
}

// Sliding windows: Mistral-style (every llama layer, only with the key), Gemma 2 (llama.cpp's
// default 4096, every other layer, soft-caps 50 / 30) and Gemma 3 (the key required, 5 of 6 layers,
// local RoPE base 10000, no caps); refused where the architecture has none.
TEST(ModelConfig, SlidingWindows) {
  FileBuilder b;
  b.layers = 12;
  EXPECT_EQ(ModelConfig::from_model_file(b.build()).sliding_window, 0);
  ModelFile f = b.build();
  f.meta.set("llama.attention.sliding_window", MetaValue::u32(16));
  ModelConfig c = ModelConfig::from_model_file(f);
  EXPECT_EQ(c.kv_window(), 16);
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(c.layer_window(l), 16);
  EXPECT_EQ(c.attn_softcap, 0.f);

  b.arch = "gemma2";
  c = ModelConfig::from_model_file(b.build());
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.kv_window(), 0);  // a global layer keeps every block
  EXPECT_EQ(c.layer_window(0), 4096);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(10), 4096);
  EXPECT_EQ(c.attn_softcap, 50.f);
  EXPECT_EQ(c.final_softcap, 30.f);
  EXPECT_FLOAT_EQ(c.embed_scale, 8.f);
  EXPECT_TRUE(c.gelu_ffn && c.post_norms && !c.qk_norm);
  EXPECT_EQ(c.rope_style, RopeStyle::Neox);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.f / std::sqrt(8.f));

  b.arch = "gemma3";
  expect_error(b, "missing metadata key 'gemma3.attention.sliding_window'");
  f = b.build();
  f.meta.set("gemma3.attention.sliding_window", MetaValue::u32(32));
  c = ModelConfig::from_model_file(f);
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(c.layer_window(l), l % 6 == 5 ? 0 : 32) << l;
  EXPECT_EQ(c.attn_softcap, 0.f);
  EXPECT_EQ(c.final_softcap, 0.f);
  EXPECT_EQ(c.rope_freq_base_swa, 10000.f);
  EXPECT_TRUE(c.qk_norm);

  b.arch = "qwen2";
  f = b.build();
  f.meta.set("qwen2.attention.sliding_window", MetaValue::u32(32));
  EXPECT_THROW(ModelConfig::from_model_file(f), FormatError);
}

TEST(ModelConfig, SupportedArchitectures) {
  auto archs = supported_architectures();
  ASSERT_EQ(archs.size(), 8u);
  EXPECT_EQ(archs[0], "llama");
  EXPECT_EQ(archs[1], "qwen2");
  EXPECT_EQ(archs[2], "qwen2moe");
  EXPECT_EQ(archs[3], "qwen3moe");
  EXPECT_EQ(archs[4], "qwen3");
  EXPECT_EQ(archs[5], "phi3");
  EXPECT_EQ(archs[6], "gemma2");
  EXPECT_EQ(archs[7], "gemma3");
}

TEST(ModelConfig, Qwen3NormsQkHeadsWithNeoxRope) {
  FileBuilder b;
  b.arch = "qwen3";
  b.kv_heads = 4;
  b.key_length = 16;
  b.q_shape = {64, 128};
  const ModelConfig c = ModelConfig::from_model_file(b.build());
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_EQ(c.rope_style, RopeStyle::Neox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.fused_qkv);
  EXPECT_EQ(c.head_dim, 16);
}

TEST(ModelConfig, Phi3FusedTensorsWindowAndLongRope) {
  FileBuilder b;
  b.arch = "phi3";
  b.kv_heads = 2;  // q 64 + k 16 + v 16 rows
  b.extra_tensors = {{"blk.0.attn_qkv.weight", {64, 96}}};
  b.extra_keys = {{"attention.sliding_window", 100}};
  ModelConfig c = ModelConfig::from_model_file(b.build());
  EXPECT_EQ(c.arch, Arch::Phi3);
  EXPECT_EQ(c.rope_style, RopeStyle::Neox);
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.context_length, 100);  // capped at the window: attention is exact there
  EXPECT_EQ(c.sliding_window, 0);    // not applied as a window: llama.cpp runs phi3 without one
  b.extra_keys = {{"attention.sliding_window", 1000}};
  EXPECT_EQ(ModelConfig::from_model_file(b.build()).context_length, 256);

  b.extra_tensors = {{"blk.0.attn_qkv.weight", {64, 128}}};
  expect_error(b, "tensor 'blk.0.attn_qkv.weight' has shape [64, 128], expected [64, 96]");
  b.extra_tensors = {{"blk.0.attn_qkv.weight", {64, 96}}, {"rope_factors_long.weight", {4}}};
  expect_error(b, "tensor 'rope_factors_long.weight': LongRoPE (Phi-3 128k variants) is not supported");
  b.extra_tensors = {{"blk.0.attn_qkv.weight", {64, 96}}};
  b.extra_keys = {{"expert_count", 4}, {"expert_used_count", 2}};
  expect_error(b, "experts in a phi3 file are not supported");
}

}  // namespace
}  // namespace peregrine
