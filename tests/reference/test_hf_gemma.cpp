// Gemma 2 / 3 Hugging Face folders: a synthetic gemma GGUF written out as the HF checkpoint it
// would come from (HF tensor names and layouts, norm gains stored as w - 1, config.json with the
// window, soft-caps and Gemma's keys) loads back to the same model: every tensor equal, and the
// reference forward gives the same logits on both. Plus the config keys GGUF cannot carry.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors_test_util.h"
#include "reference/reference_forward.h"
#include "synth/synthetic.h"
#include "tiny_specs.h"
#include "util/error.h"

namespace peregrine {
namespace {

using nlohmann::json;

// GGUF layer tensor -> HF name (Gemma's).
const std::map<std::string, std::string> kLayerNames = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string hf_name(const std::string& gguf) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  const size_t dot = gguf.find('.', 4);
  return "model.layers." + gguf.substr(4, dot - 4) + "." + kLayerNames.at(gguf.substr(dot + 1));
}

json gemma_config(const SyntheticSpec& s) {
  json c = {{"architectures", {s.arch == "gemma2" ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM"}},
            {"hidden_size", s.dim}, {"intermediate_size", s.ffn_dim}, {"num_hidden_layers", s.n_layers},
            {"num_attention_heads", s.n_heads}, {"num_key_value_heads", s.n_kv_heads}, {"head_dim", s.head_dim()},
            {"max_position_embeddings", s.context_length}, {"rms_norm_eps", s.rms_eps},
            {"rope_theta", s.rope_freq_base}, {"vocab_size", s.n_vocab}, {"sliding_window", s.sliding_window},
            {"hidden_activation", "gelu_pytorch_tanh"}, {"query_pre_attn_scalar", s.head_dim()}};
  if (s.arch == "gemma2") {
    c["attn_logit_softcapping"] = s.attn_softcap;
    c["final_logit_softcapping"] = s.final_softcap;
  } else {
    c["rope_local_base_freq"] = 10000.0;
    c["sliding_window_pattern"] = 6;
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.rope_linear_factor}};
  }
  return c;
}

// The GGUF's tensors as HF F32 tensors, norm gains minus 1 (the inverse of the loader's + 1).
std::filesystem::path write_hf_folder(const ModelFile& gguf, const SyntheticSpec& spec, const json& config) {
  std::vector<test::StEntry> entries;
  for (const TensorView& t : gguf.tensors) {
    const int64_t rows = t.shape.size() == 2 ? t.shape[1] : 1;
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    for (int64_t r = 0; r < rows; ++r) {
      t.dequantize_row_to(r, std::span<float>(values).subspan(static_cast<size_t>(r * t.row_length()),
                                                                 static_cast<size_t>(t.row_length())));
    }
    const bool norm = t.name.ends_with("norm.weight");
    if (norm) {
      for (float& v : values) v -= 1.0f;
    }
    std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());
    entries.push_back({hf_name(t.name), "F32", shape, test::f32_bytes(values)});
  }
  const auto dir = test::scratch_dir("hf-gemma-" + spec.name);
  test::write_text(dir / "config.json", config.dump());
  const json tokenizer = {
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"},
                 {"vocab", {{"<unk>", 0}, {"<bos>", 1}, {"<eos>", 2}, {"a", 3}}}, {"merges", json::array()}}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
      {"added_tokens", json::array({{{"id", 1}, {"content", "<bos>"}, {"special", true}},
                                    {{"id", 2}, {"content", "<eos>"}, {"special", true}}})}};
  test::write_text(dir / "tokenizer.json", tokenizer.dump());
  test::write_text(dir / "tokenizer_config.json", json{{"bos_token", "<bos>"}, {"eos_token", "<eos>"}}.dump());
  test::write_file(dir / "model.safetensors", test::safetensors_bytes(entries));
  return dir;
}

class HfGemma : public ::testing::TestWithParam<SyntheticSpec> {};

TEST_P(HfGemma, FolderLoadsToTheSameModelAsItsGguf) {
  const SyntheticSpec& spec = GetParam();
  const auto dir = test::scratch_dir("hf-gemma-gguf-" + spec.name);
  write_synthetic_gguf(spec, TensorType::F32, 9, dir / "model.gguf");
  const ModelFile gguf = read_gguf(dir / "model.gguf");
  const ModelFile hf = read_hf_checkpoint(write_hf_folder(gguf, spec, gemma_config(spec)));
  EXPECT_EQ(hf.meta.get_string("general.architecture"), spec.arch);
  EXPECT_EQ(hf.meta.get_int(spec.arch + ".attention.sliding_window"), spec.sliding_window);
  for (const TensorView& t : gguf.tensors) {
    const TensorView& h = hf.require(t.name);
    ASSERT_EQ(h.shape, t.shape) << t.name;
    std::vector<float> a(static_cast<size_t>(t.row_length())), b(a.size());
    t.dequantize_row_to(0, a);
    h.dequantize_row_to(0, b);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f) << t.name << " " << i;
  }
  const std::vector<int32_t> tokens = {1, 17, 250, 3, 99, 140, 7, 61, 200, 12};  // past the window of 3
  const auto want = reference_forward(gguf, tokens), got = reference_forward(hf, tokens);
  for (size_t t = 0; t < want.size(); ++t) {
    for (size_t v = 0; v < want[t].size(); ++v) ASSERT_NEAR(got[t][v], want[t][v], 1e-4) << t << " " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Gemma, HfGemma, ::testing::ValuesIn([] {
                           auto all = test::tiny_window_specs();
                           return std::vector<SyntheticSpec>(all.begin() + 1, all.end());  // gemma2, gemma3
                         }()),
                         [](const auto& info) { return info.param.arch; });

// What GGUF cannot say must be what llama.cpp assumes, or the folder is refused by name.
TEST(HfGemmaConfig, RefusesSettingsGgufCannotCarry) {
  SyntheticSpec spec = test::tiny_window_specs()[2];  // gemma3
  const auto dir = test::scratch_dir("hf-gemma-refuse");
  write_synthetic_gguf(spec, TensorType::F32, 9, dir / "model.gguf");
  const ModelFile gguf = read_gguf(dir / "model.gguf");
  auto expect_refused = [&](json config, const std::string& needle) {
    try {
      read_hf_checkpoint(write_hf_folder(gguf, spec, config));
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json c = gemma_config(spec);
  c["query_pre_attn_scalar"] = 100;
  expect_refused(c, "query_pre_attn_scalar");
  c = gemma_config(spec);
  c["rope_local_base_freq"] = 20000.0;
  expect_refused(c, "rope_local_base_freq");
  c = gemma_config(spec);
  c["final_logit_softcapping"] = 30.0;
  expect_refused(c, "final_logit_softcapping");
  c = gemma_config(spec);
  c["hidden_activation"] = "silu";
  expect_refused(c, "hidden_activation");
  c = gemma_config(spec);
  c.erase("sliding_window");
  expect_refused(c, "sliding_window");
}

}  // namespace
}  // namespace peregrine
