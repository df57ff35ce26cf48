// `peregrine` on Hugging Face checkpoint folders: the exported demo folder runs, tokenizes,
// describes and converts like the GGUF it came from; broken folders give one clear line naming
// the file at fault and exit 1.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/hf_demo_export.h"

namespace peregrine::test {
namespace {

using nlohmann::json;

json run_json(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"run", model, "-p", "It is a truth universally", "-n", "24", "--temperature", "0",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  Result r = peregrine(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

TEST(CliHf, FolderRunsLikeItsGguf) {
  const std::string dir = exported_demo("cli").string(), gguf = demo_gguf().string();
  EXPECT_EQ(run_json(dir)["tokens"], run_json(gguf)["tokens"]);
  EXPECT_EQ(run_json(dir, {"--type", "q8_0"})["tokens"], run_json(gguf, {"--type", "q8_0"})["tokens"]);

  Result info = peregrine({"info", dir, "--type", "q4_0"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("(Hugging Face checkpoint)"), std::string::npos) << info.out;
  // 3 layers x 6 matrices + the embedding; ffn_down rows (688) do not split into q4_0 blocks of 32
  EXPECT_NE(info.out.find("f32 x10, q4_0 x19"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("tokenizer:        llama"), std::string::npos) << info.out;

  Result a = peregrine({"tokenize", dir, "-p", "Mr. Darcy said: \"Indeed!\""});
  Result b = peregrine({"tokenize", gguf, "-p", "Mr. Darcy said: \"Indeed!\""});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(CliHf, ConvertFolderToGguf) {
  const std::string dir = exported_demo("cli-convert", "--dtype bf16 --shards 2").string();
  const auto out = scratch_dir("cli-hf-convert") / "demo.gguf";
  Result conv = peregrine({"convert", dir, "-o", out.string(), "--type", "bf16"});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  EXPECT_EQ(run_json(out.string())["tokens"], run_json(dir)["tokens"]);
  Result info = peregrine({"info", out.string()});
  EXPECT_NE(info.out.find("bf16 x22, f32 x7"), std::string::npos) << info.out;
}

// Copies the exported folder to a scratch folder and lets `edit` break it.
std::filesystem::path broken_copy(const std::string& name, const std::function<void(const std::filesystem::path&)>& edit,
                                  const std::string& args = "") {
  const auto dir = scratch_dir("cli-hf-bad-" + name);
  std::filesystem::copy(exported_demo("bad-source-" + std::to_string(args.size()), args), dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  edit(dir);
  return dir;
}

void edit_json(const std::filesystem::path& file, const std::function<void(json&)>& edit) {
  json j = json::parse(slurp(file));
  edit(j);
  std::ofstream(file, std::ios::binary) << j.dump();
}

void expect_clear_error(const std::filesystem::path& dir, const std::string& file, const std::string& problem) {
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"info"}, {"run", "-p", "x"}}) {
    std::vector<std::string> args = cmd;
    args.insert(args.begin() + 1, dir.string());
    Result r = peregrine(args);
    EXPECT_EQ(r.exit_code, 1) << cmd[0] << ": " << r.err;
    EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(problem), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
}

TEST(CliHf, BrokenFoldersGiveOneClearLine) {
  expect_clear_error(broken_copy("arch", [](const auto& d) {
                       edit_json(d / "config.json", [](json& j) { j["architectures"] = {"GPTNeoXForCausalLM"}; });
                     }),
                     "config.json", "architecture 'GPTNeoXForCausalLM' is not supported");
  expect_clear_error(broken_copy("field", [](const auto& d) {
                       edit_json(d / "config.json", [](json& j) { j.erase("num_attention_heads"); });
                     }),
                     "config.json", "missing key 'num_attention_heads'");
  expect_clear_error(broken_copy("rope", [](const auto& d) {
                       edit_json(d / "config.json", [](json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}}; });
                     }),
                     "config.json", "rope_scaling type 'yarn' is not supported");
  expect_clear_error(broken_copy("truncated", [](const auto& d) {
                       std::filesystem::resize_file(d / "model.safetensors",
                                                    std::filesystem::file_size(d / "model.safetensors") - 100);
                     }),
                     "model.safetensors", "past the end of the data (");
  expect_clear_error(broken_copy("offsets", [](const auto& d) {
                       // Lie about one tensor's size in the header, keeping the header length.
                       std::string bytes = slurp(d / "model.safetensors");
                       const size_t at = bytes.find("\"shape\":[256]");
                       ASSERT_NE(at, std::string::npos);
                       bytes.replace(at, 13, "\"shape\":[255]");
                       std::ofstream(d / "model.safetensors", std::ios::binary) << bytes;
                     }),
                     "model.safetensors", "needs 1020");
  expect_clear_error(broken_copy("shard", [](const auto& d) {
                       std::filesystem::remove(d / "model-00002-of-00002.safetensors");
                     }, "--shards 2"),
                     "model.safetensors.index.json", "shard 'model-00002-of-00002.safetensors'");
  expect_clear_error(broken_copy("tokenizer", [](const auto& d) {
                       edit_json(d / "tokenizer.json", [](json& j) { j["model"]["type"] = "WordPiece"; });
                     }),
                     "tokenizer.json", "tokenizer model type 'WordPiece' is not supported");
  expect_clear_error(broken_copy("weights", [](const auto& d) { std::filesystem::remove(d / "model.safetensors"); }),
                     "cli-hf-bad-weights", "no model.safetensors or model.safetensors.index.json");
}

// Issue 27: a tokenizer_config.json with bos_token null (Qwen2, Qwen3) takes the BOS from
// generation_config.json, else config.json, as transformers' generate() does; with neither there
// is no BOS (not a default id), and an empty prompt is refused rather than started from a guess.
TEST(CliHf, BosComesFromTheModelsConfigWhenTheTokenizerNamesNone) {
  auto no_bos_token = [](const std::filesystem::path& d) {  // as Qwen2's files are
    edit_json(d / "tokenizer_config.json", [](json& j) {
      j["bos_token"] = nullptr;
      j["add_bos_token"] = false;
    });
    edit_json(d / "tokenizer.json", [](json& j) { j["post_processor"] = nullptr; });
  };
  const auto generation = broken_copy("bos-generation", [&](const auto& d) {
    no_bos_token(d);
    std::ofstream(d / "generation_config.json") << json{{"bos_token_id", 3}, {"eos_token_id", {2, 4}}}.dump();
  });
  Result info = peregrine({"info", generation.string()});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("BOS 3, EOS 2"), std::string::npos) << "generation_config.json's id: " << info.out;
  const auto config = broken_copy("bos-config", [&](const auto& d) {
    no_bos_token(d);
    edit_json(d / "config.json", [](json& j) { j["bos_token_id"] = 5; });
  });
  info = peregrine({"info", config.string()});
  EXPECT_NE(info.out.find("BOS 5,"), std::string::npos) << "config.json's id: " << info.out;
  Result empty = peregrine({"run", config.string(), "-p", "", "-n", "2", "--temperature", "0", "--json"});
  EXPECT_EQ(empty.exit_code, 0) << empty.err;

  const auto none = broken_copy("bos-none", [&](const auto& d) {
    no_bos_token(d);
    edit_json(d / "config.json", [](json& j) { j.erase("bos_token_id"); });
  });
  info = peregrine({"info", none.string()});
  EXPECT_NE(info.out.find("BOS -1,"), std::string::npos) << "no BOS, not a default id: " << info.out;
  empty = peregrine({"run", none.string(), "-p", "", "-n", "2"});
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_NE(empty.err.find("no BOS"), std::string::npos) << empty.err;
  const auto bad = broken_copy("bos-range", [&](const auto& d) {
    no_bos_token(d);
    edit_json(d / "config.json", [](json& j) { j["bos_token_id"] = 5000; });
  });
  expect_clear_error(bad, "config.json", "bos_token_id 5000 is not in the vocabulary");
}

// Issue 27: a tensor of the wrong shape in a folder is named as the file names it, with its
// shape as the file writes it (PyTorch order), not by its GGUF name with reversed dimensions.
TEST(CliHf, ShapeErrorsSpeakTheFilesTerms) {
  const auto ffn = broken_copy(
      "shape-ffn", [](const auto& d) { edit_json(d / "config.json", [](json& j) { j["intermediate_size"] = 700; }); });
  Result r = peregrine({"run", ffn.string(), "-p", "x", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.safetensors: tensor 'model.layers.0.mlp."), std::string::npos) << r.err;
  const bool gate_or_up = r.err.find("has shape [688, 256], expected [700, 256]") != std::string::npos;
  const bool down = r.err.find("has shape [256, 688], expected [256, 700]") != std::string::npos;
  EXPECT_TRUE(gate_or_up || down) << r.err;
  EXPECT_EQ(r.err.find("blk."), std::string::npos) << r.err;

  // (Qwen2: no Q/K row permutation, so the config's check of the query shape is the one that speaks.)
  const auto heads = broken_copy("shape-q", [](const auto& d) {
    edit_json(d / "config.json", [](json& j) {
      j["architectures"] = {"Qwen2ForCausalLM"};
      j["head_dim"] = 16;
    });
  });
  r = peregrine({"run", heads.string(), "-p", "x", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor 'model.layers.0.self_attn.q_proj.weight' has shape [256, 256], expected [128, 256]"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace peregrine::test
