// `peregrine` on Hugging Face checkpoint folders: the exported demo folder runs, tokenizes,
// describes and converts like the GGUF it came from; broken folders give one clear line naming
// the file at fault and exit 1.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace peregrine::test
