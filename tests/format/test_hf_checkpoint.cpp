// The Hugging Face folder loader on tiny hand-made folders: config.json -> GGUF metadata, tensor
// names and shapes, the Q/K row permutation (exactly llama.cpp's), dtype handling, and one clear
// error naming the file for what it cannot load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "format/hf_checkpoint.h"
#include "safetensors_test_util.h"
#include "util/error.h"

namespace peregrine {
namespace {

using nlohmann::json;
using test::StEntry;

// dim 8, 2 heads of 4, 1 KV head, ffn 16, 1 layer, vocab 6.
json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 8}, {"intermediate_size", 16},
          {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
          {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-6}, {"rope_theta", 500000.0},
          {"vocab_size", 6}, {"tie_word_embeddings", true}, {"hidden_act", "silu"}};
}

json tiny_tokenizer() {
  return {{"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"},
                     {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\xE2\x96\x81", 3}, {"a", 4}, {"\xE2\x96\x81" "a", 5}}},
                     {"merges", {"\xE2\x96\x81 a"}}}},
          {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
          {"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                        {{"id", 2}, {"content", "</s>"}, {"special", true}}})}};
}

// Row r of a [rows, cols] F32 matrix holds the value r (so permutations are visible).
StEntry rows_entry(const std::string& name, int rows, int cols) {
  std::vector<float> v;
  for (int r = 0; r < rows; ++r) v.insert(v.end(), static_cast<size_t>(cols), static_cast<float>(r));
  return {name, "F32", {rows, cols}, test::f32_bytes(v)};
}

std::vector<StEntry> tiny_tensors() {
  return {rows_entry("model.embed_tokens.weight", 6, 8),     rows_entry("model.norm.weight", 1, 8),
          rows_entry("model.layers.0.input_layernorm.weight", 1, 8),
          rows_entry("model.layers.0.self_attn.q_proj.weight", 8, 8),
          rows_entry("model.layers.0.self_attn.k_proj.weight", 4, 8),
          rows_entry("model.layers.0.self_attn.v_proj.weight", 4, 8),
          rows_entry("model.layers.0.self_attn.o_proj.weight", 8, 8),
          rows_entry("model.layers.0.post_attention_layernorm.weight", 1, 8),
          rows_entry("model.layers.0.mlp.gate_proj.weight", 16, 8),
          rows_entry("model.layers.0.mlp.up_proj.weight", 16, 8),
          rows_entry("model.layers.0.mlp.down_proj.weight", 8, 16)};
}

// Norms are 1-D: drop the leading 1 the helper gave them.
std::vector<StEntry> fix_norms(std::vector<StEntry> t) {
  for (auto& e : t) {
    if (e.name.find("norm") != std::string::npos) e.shape = {8};
  }
  return t;
}

std::filesystem::path write_folder(const std::string& name, const json& config,
                                   const std::vector<StEntry>& tensors, const json& tokenizer = tiny_tokenizer()) {
  const auto dir = test::scratch_dir("hf-" + name);
  test::write_text(dir / "config.json", config.dump());
  test::write_text(dir / "tokenizer.json", tokenizer.dump());
  test::write_text(dir / "tokenizer_config.json", json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}.dump());
  test::write_file(dir / "model.safetensors", test::safetensors_bytes(tensors));
  return dir;
}

std::vector<float> row_values(const TensorView& t) {
  std::vector<float> out;
  std::vector<float> row(static_cast<size_t>(t.row_length()));
  for (int64_t r = 0; r < t.n_rows(); ++r) {
    t.dequantize_row_to(r, row);
    out.push_back(row[0]);
  }
  return out;
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    read_hf_checkpoint(dir);
    return "";
  } catch (const FormatError& e) {
    return e.what();
  }
}

TEST(HfCheckpoint, ConfigBecomesGgufMetadata) {
  const ModelFile mf = read_hf_checkpoint(write_folder("meta", tiny_config(), fix_norms(tiny_tensors())));
  const Metadata& m = mf.meta;
  EXPECT_EQ(m.get_string("general.architecture"), "llama");
  EXPECT_EQ(m.get_int("llama.embedding_length"), 8);
  EXPECT_EQ(m.get_int("llama.feed_forward_length"), 16);
  EXPECT_EQ(m.get_int("llama.block_count"), 1);
  EXPECT_EQ(m.get_int("llama.attention.head_count"), 2);
  EXPECT_EQ(m.get_int("llama.attention.head_count_kv"), 1);
  EXPECT_EQ(m.get_int("llama.context_length"), 32);
  EXPECT_EQ(m.get_int("llama.rope.dimension_count"), 4);
  EXPECT_FLOAT_EQ(static_cast<float>(m.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_FLOAT_EQ(static_cast<float>(m.get_float("llama.rope.freq_base")), 500000.f);
  EXPECT_FALSE(m.contains("llama.attention.key_length"));
  EXPECT_EQ(m.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(m.get_int("tokenizer.ggml.bos_token_id"), 1);
  // GGUF shapes are the reversed PyTorch shapes; tied embeddings mean no output.weight.
  EXPECT_EQ(mf.require("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(mf.require("token_embd.weight").shape, (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(mf.find("output.weight"), nullptr);
  EXPECT_EQ(mf.tensors.front().name, "token_embd.weight");
}

// Issue 27: shape errors name the file's tensor and write its shape (and the one expected) in the
// file's dimension order, the reverse of GGUF's.
TEST(HfCheckpoint, ShapeErrorsSpeakTheFilesTerms) {
  const ModelFile mf = read_hf_checkpoint(write_folder("shape-terms", tiny_config(), fix_norms(tiny_tensors())));
  const std::string e = mf.shape_error("blk.0.ffn_down.weight", {16, 9});
  EXPECT_NE(e.find("model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape [8, 16], expected "
                   "[9, 16]"),
            std::string::npos)
      << e;
  EXPECT_EQ(mf.shape_in_file("token_embd.weight", std::vector<std::string>{"8", "n_vocab"}), "[n_vocab, 8]");
}

TEST(HfCheckpoint, QkRowsPermutedLikeLlamaCpp) {
  json cfg = tiny_config();
  cfg["attention_bias"] = true;
  auto tensors = fix_norms(tiny_tensors());
  std::vector<float> qb(8), kb(4), vb(4);
  for (int i = 0; i < 8; ++i) qb[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int i = 0; i < 4; ++i) kb[static_cast<size_t>(i)] = vb[static_cast<size_t>(i)] = static_cast<float>(i);
  tensors.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {8}, test::f32_bytes(qb)});
  tensors.push_back({"model.layers.0.self_attn.k_proj.bias", "F32", {4}, test::f32_bytes(kb)});
  tensors.push_back({"model.layers.0.self_attn.v_proj.bias", "F32", {4}, test::f32_bytes(vb)});
  const ModelFile mf = read_hf_checkpoint(write_folder("permute", cfg, tensors));
  // reshape(n_head, 2, d/2).swapaxes(1, 2): per head of 4 rows, HF rows 0 2 1 3 become GGUF 0 1 2 3.
  EXPECT_EQ(row_values(mf.require("blk.0.attn_q.weight")), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(row_values(mf.require("blk.0.attn_k.weight")), (std::vector<float>{0, 2, 1, 3}));
  EXPECT_EQ(row_values(mf.require("blk.0.attn_v.weight")), (std::vector<float>{0, 1, 2, 3}));
  std::vector<float> bias(8);
  mf.require("blk.0.attn_q.bias").dequantize_row_to(0, bias);
  EXPECT_EQ(bias, (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  std::vector<float> vbias(4);
  mf.require("blk.0.attn_v.bias").dequantize_row_to(0, vbias);
  EXPECT_EQ(vbias, (std::vector<float>{0, 1, 2, 3}));
}

TEST(HfCheckpoint, Qwen2KeepsRowsAndDtypesViewedOrWidened) {
  json cfg = tiny_config();
  cfg["architectures"] = {"Qwen2ForCausalLM"};
  auto tensors = fix_norms(tiny_tensors());
  for (auto& e : tensors) {  // everything BF16, as real checkpoints ship
    std::vector<uint8_t> bf16;
    for (size_t i = 0; i < e.data.size(); i += 4) bf16.insert(bf16.end(), {e.data[i + 2], e.data[i + 3]});
    e.dtype = "BF16";
    e.data = bf16;
  }
  const ModelFile mf = read_hf_checkpoint(write_folder("qwen2", cfg, tensors));
  EXPECT_EQ(mf.meta.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(row_values(mf.require("blk.0.attn_q.weight")), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mf.require("blk.0.attn_q.weight").type, TensorType::BF16);
  EXPECT_EQ(mf.require("blk.0.attn_norm.weight").type, TensorType::F32);  // 1-D: widened like the converter
}

TEST(HfCheckpoint, OptionalConfigFeatures) {
  json cfg = tiny_config();
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["sliding_window"] = 16;
  cfg["head_dim"] = 4;
  cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelFile mf = read_hf_checkpoint(write_folder("features", cfg, fix_norms(tiny_tensors())));
  EXPECT_EQ(mf.meta.get_int("llama.attention.sliding_window"), 16);  // Mistral's window, every layer
  std::vector<float> f(2);
  mf.require("rope_freqs.weight").dequantize_row_to(0, f);
  EXPECT_EQ(f[0], 1.0f);   // wavelength 2*pi: kept
  // Wavelength 2*pi*sqrt(500000) = 4443 lies between 8192/4 and 8192: interpolated.
  const double smooth = (8192.0 / (2 * 3.14159265358979 * std::sqrt(500000.0)) - 1.0) / 3.0;
  EXPECT_NEAR(f[1], 1.0 / ((1 - smooth) / 32 + smooth), 1e-5);

  cfg = tiny_config();
  cfg["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  cfg["head_dim"] = 2;  // != hidden_size / heads: key_length is stated
  cfg["tie_word_embeddings"] = false;
  auto tensors = fix_norms(tiny_tensors());
  tensors[3] = rows_entry("model.layers.0.self_attn.q_proj.weight", 4, 8);
  tensors[4] = rows_entry("model.layers.0.self_attn.k_proj.weight", 2, 8);
  tensors.push_back(rows_entry("lm_head.weight", 6, 8));
  const ModelFile lin = read_hf_checkpoint(write_folder("linear", cfg, tensors));
  EXPECT_EQ(lin.meta.get_string("llama.rope.scaling.type"), "linear");
  EXPECT_FLOAT_EQ(static_cast<float>(lin.meta.get_float("llama.rope.scaling.factor")), 4.f);
  EXPECT_EQ(lin.meta.get_int("llama.attention.key_length"), 2);
  EXPECT_NE(lin.find("output.weight"), nullptr);
}

TEST(HfCheckpoint, ClearErrors) {
  auto with = [](const std::function<void(json&)>& edit) {
    json c = tiny_config();
    edit(c);
    return c;
  };
  struct Case {
    std::string name;
    json config;
    std::vector<StEntry> tensors;
    std::string file, expect;
  };
  auto t = fix_norms(tiny_tensors());
  auto extra = t;
  extra.push_back(rows_entry("model.layers.1.mlp.up_proj.weight", 16, 8));
  auto untied = t;
  const std::vector<Case> cases = {
      {"arch", with([](json& c) { c["architectures"] = {"BertModel"}; }), t, "config.json",
       "architecture 'BertModel' is not supported"},
      {"noarch", with([](json& c) { c.erase("architectures"); }), t, "config.json", "missing key 'architectures'"},
      {"missing", with([](json& c) { c.erase("rms_norm_eps"); }), t, "config.json", "missing key 'rms_norm_eps'"},
      {"type", with([](json& c) { c["hidden_size"] = "8"; }), t, "config.json", "'hidden_size' is not an integer"},
      {"range", with([](json& c) { c["num_hidden_layers"] = 0; }), t, "config.json", "'num_hidden_layers' = 0 is out of range"},
      {"heads", with([](json& c) { c["num_key_value_heads"] = 3; }), t, "config.json", "not a multiple of 'num_key_value_heads'"},
      {"act", with([](json& c) { c["hidden_act"] = "gelu"; }), t, "config.json", "only silu"},
      {"mlpbias", with([](json& c) { c["mlp_bias"] = true; }), t, "config.json", "MLP biases are not supported"},
      {"rope", with([](json& c) { c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2}}; }), t, "config.json",
       "rope_scaling type 'dynamic' is not supported"},
      {"unknown", tiny_config(), extra, "model.safetensors", "'model.layers.1.mlp.up_proj.weight' is not part of"},
      {"untied", with([](json& c) { c["tie_word_embeddings"] = false; }), untied, "hf-untied",
       "no tensor 'lm_head.weight'"},
      {"phi3-longrope",
       with([](json& c) {
         c["architectures"] = {"Phi3ForCausalLM"};
         c["rope_scaling"] = {{"type", "longrope"}, {"long_factor", {1.0, 2.0}}, {"short_factor", {1.0, 1.0}}};
       }),
       t, "config.json", "rope_scaling type 'longrope' is not supported"},
      {"phi3-partial", with([](json& c) {
         c["architectures"] = {"Phi3ForCausalLM"};
         c["partial_rotary_factor"] = 0.75;
       }),
       t, "config.json", "partial rotary embeddings are not supported"},
      {"qwen3-swa", with([](json& c) {
         c["architectures"] = {"Qwen3ForCausalLM"};
         c["use_sliding_window"] = true;
       }),
       t, "config.json", "sliding-window attention is not supported"},
  };
  for (const Case& c : cases) {
    const std::string msg = load_error(write_folder(c.name, c.config, c.tensors));
    EXPECT_NE(msg.find(c.file), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  const auto no_config = test::scratch_dir("hf-noconfig");
  EXPECT_NE(load_error(no_config).find("no config.json"), std::string::npos);
}

TEST(HfCheckpoint, TokenizerErrors) {
  auto tok_error = [](const std::string& name, const std::function<void(json&)>& edit) {
    json tok = tiny_tokenizer();
    edit(tok);
    return load_error(write_folder(name, tiny_config(), fix_norms(tiny_tensors()), tok));
  };
  EXPECT_NE(tok_error("tok-unigram", [](json& t) { t["model"]["type"] = "Unigram"; })
                .find("tokenizer.json: tokenizer model type 'Unigram' is not supported"),
            std::string::npos);
  EXPECT_NE(tok_error("tok-norm", [](json& t) { t["normalizer"] = {{"type", "Lowercase"}}; })
                .find("tokenizer.json: normalizer"),
            std::string::npos);
  EXPECT_NE(tok_error("tok-regex", [](json& t) {
              t["normalizer"] = nullptr;
              t["pre_tokenizer"] = {{"type", "Sequence"},
                                    {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}},
                                                       {{"type", "ByteLevel"}, {"use_regex", false}}}}};
            }).find("is not one peregrine implements"),
            std::string::npos);
  EXPECT_NE(tok_error("tok-big", [](json& t) { t["model"]["vocab"]["x"] = 9; })
                .find("has 10 tokens but the model's embedding has only 6 rows"),
            std::string::npos);
  EXPECT_NE(tok_error("tok-shape", [](json& t) { t["pre_tokenizer"] = {{"type", "Split"}, {"behavior", 5}}; })
                .find("has an unexpected structure"),
            std::string::npos);
  EXPECT_NE(tok_error("tok-strip", [](json& t) { t["added_tokens"][0]["lstrip"] = true; })
                .find("sets lstrip, which is not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace peregrine
