// Model names (hub/model_name.h), what a repository runs as (hub/model_choice.h) and the digests
// the hub names files by (hub/digest.h): the pieces every command and `pull` rely on.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_paths.h"
#include "hub/digest.h"
#include "hub/local_hub.h"
#include "hub/model_choice.h"
#include "hub/model_name.h"
#include "util/error.h"

namespace peregrine::hub {
namespace {

HubName hub_name(const std::string& s) {
  auto n = parse_model_name(s);
  EXPECT_TRUE(n.has_value()) << s;
  return n ? std::get<HubName>(*n) : HubName{};
}

TEST(HubNames, HuggingFaceForms) {
  HubName n = hub_name("Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(n.repo, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(n.revision, "main");
  EXPECT_FALSE(n.revision_given);
  EXPECT_EQ(n.selector, "");

  n = hub_name("bartowski/Llama-3.2-1B-Instruct-GGUF@refs/pr/1:Q4_K_M");
  EXPECT_EQ(n.repo, "bartowski/Llama-3.2-1B-Instruct-GGUF");
  EXPECT_EQ(n.revision, "refs/pr/1");
  EXPECT_EQ(n.selector, "Q4_K_M");
  EXPECT_EQ(n.text(), "bartowski/Llama-3.2-1B-Instruct-GGUF@refs/pr/1:Q4_K_M");

  n = hub_name("hf:org/name:sub/dir/model.gguf");
  EXPECT_EQ(n.selector, "sub/dir/model.gguf");
}

TEST(HubNames, PathsAreNotNames) {
  for (const char* p : {"model.gguf", "models/demo.gguf", "./org/name", "/abs/org/name", "~/x/y", "stories15M.bin",
                        "justaword", "a/b/c"})
    EXPECT_FALSE(parse_model_name(p).has_value()) << p;
}

TEST(HubNames, NoPartEscapesItsFolder) {
  for (const char* bad : {"hf:../x", "hf:org/..", "hf:org/na--me", "hf:org/name@../../etc", "hf:org/name@/abs",
                          "hf:org/name:../../etc/passwd", "hf:org/name:/etc/passwd", "hf:org/name:a//b", "hf:org/",
                          "hf:org/name@", "hf:org/name:", "hf:-org/name"})
    EXPECT_THROW(parse_hub_name(bad), UsageError) << bad;
  for (const char* bad : {"ollama:", "ollama:../x", "ollama:a/b/c/d", "ollama:x:..", "ollama:..:tag", "ollama:h/../m"})
    EXPECT_THROW(parse_model_name(bad), UsageError) << bad;
  // Without "hf:", text that is no valid name is a path (which then does not exist).
  EXPECT_FALSE(parse_model_name("org/na--me").has_value());
}

TEST(HubNames, OllamaForms) {
  auto n = std::get<OllamaName>(*parse_model_name("ollama:llama3.2"));
  EXPECT_EQ(n.host, "registry.ollama.ai");
  EXPECT_EQ(n.ns, "library");
  EXPECT_EQ(n.model, "llama3.2");
  EXPECT_EQ(n.tag, "latest");
  EXPECT_EQ(n.text(), "ollama:llama3.2:latest");
  n = std::get<OllamaName>(*parse_model_name("ollama:hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M"));
  EXPECT_EQ(n.host, "hf.co");
  EXPECT_EQ(n.ns, "bartowski");
  EXPECT_EQ(n.model, "Llama-3.2-1B-GGUF");
  EXPECT_EQ(n.tag, "Q4_K_M");
  n = std::get<OllamaName>(*parse_model_name("ollama:localhost:11434/me/tiny:v1"));
  EXPECT_EQ(n.host, "localhost:11434");
  EXPECT_EQ(n.tag, "v1");
}

std::string choose(const std::vector<RepoEntry>& files, const std::string& selector) {
  const ModelChoice c = choose_model(files, selector, "org/name");
  return c.folder ? "<folder>" : c.file;
}

std::string choice_error(const std::vector<RepoEntry>& files, const std::string& selector) {
  try {
    choose_model(files, selector, "org/name");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(HubChoice, FolderOrOneGguf) {
  const std::vector<RepoEntry> folder = {
      {"config.json", 600}, {"model.safetensors", 1 << 20}, {"tokenizer.json", 9000}};
  EXPECT_EQ(choose(folder, ""), "<folder>");
  EXPECT_EQ(choose(folder, "tokenizer.json"), "tokenizer.json");
  const std::vector<RepoEntry> ggufs = {{"README.md", 10},
                                        {"Llama-3.2-1B-Instruct-Q4_K_M.gguf", 800},
                                        {"Llama-3.2-1B-Instruct-Q4_K_S.gguf", 700},
                                        {"Llama-3.2-1B-Instruct-Q8_0.gguf", 1300},
                                        {"mmproj-f16.gguf", 300}};
  EXPECT_EQ(choose(ggufs, "Q4_K_M"), "Llama-3.2-1B-Instruct-Q4_K_M.gguf");
  EXPECT_EQ(choose(ggufs, "q8_0"), "Llama-3.2-1B-Instruct-Q8_0.gguf");
  EXPECT_EQ(choose(ggufs, "Llama-3.2-1B-Instruct-Q4_K_S.gguf"), "Llama-3.2-1B-Instruct-Q4_K_S.gguf");
  // Several matches, no match, no selector: each error lists the choices (the projector is none).
  const std::string several = choice_error(ggufs, "Q4_K");
  EXPECT_NE(several.find("matches 2 files"), std::string::npos) << several;
  EXPECT_NE(several.find("Q4_K_S.gguf"), std::string::npos) << several;
  const std::string none = choice_error(ggufs, "Q2_K");
  EXPECT_NE(none.find("no file or GGUF quantization 'Q2_K'"), std::string::npos) << none;
  EXPECT_NE(none.find("Q8_0.gguf  (1.3 KiB)"), std::string::npos) << none;
  const std::string unsaid = choice_error(ggufs, "");
  EXPECT_NE(unsaid.find("holds 3 GGUF files: pick one as org/name:QUANT"), std::string::npos) << unsaid;
  EXPECT_EQ(unsaid.find("mmproj"), std::string::npos) << unsaid;
  EXPECT_EQ(choose({{"only.gguf", 5}, {"mmproj-f16.gguf", 3}}, ""), "only.gguf");
  EXPECT_NE(choice_error({{"README.md", 1}}, "").find("neither a checkpoint"), std::string::npos);
}

// The digests against the tools people check files with: sha256sum and git hash-object.
TEST(HubDigest, MatchesSha256sumAndGit) {
  const auto dir = test::scratch_dir("hub-digest");
  for (const std::string& text : {std::string(), std::string("hello\n"), std::string(3 << 20, 'x')}) {
    const auto f = dir / "f";
    std::ofstream(f, std::ios::binary) << text;
    EXPECT_EQ(hex_digest_of_file(f.string(), true), test::sha256_of(f));
    EXPECT_EQ(hex_digest_of_file(f.string(), false), test::git_blob_id_of(f));
  }
}

}  // namespace
}  // namespace peregrine::hub
