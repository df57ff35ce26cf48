// Models by name from stores other tools wrote: a Hugging Face cache laid out as huggingface_hub
// lays it out, and an Ollama store laid out by hand from a synthetic GGUF. Names run, describe and
// list like the files they stand for; names that are not there say so, and how to get them.
#include <gtest/gtest.h>

#include <fstream>

#include "hub/hub_cache_layout.h"
#include "hub/hub_fixtures.h"
#include "server/server_process.h"

namespace peregrine::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCommitA = "1111111111111111111111111111111111111111";
constexpr const char* kCommitB = "2222222222222222222222222222222222222222";

class HubStores : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = scratch_dir("hub-stores-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    env_.set("HF_HUB_CACHE", (root_ / "hf").string());
    env_.set("OLLAMA_MODELS", (root_ / "ollama").string());
  }
  fs::path cache() const { return root_ / "hf"; }
  fs::path ollama() const { return root_ / "ollama"; }
  fs::path root_;
  ScopedEnv env_;
};

json list_json() {
  const Result r = peregrine({"list", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json::array();
}

const json* entry(const json& list, const std::string& name) {
  for (const auto& e : list)
    if (e["name"] == name) return &e;
  return nullptr;
}

TEST_F(HubStores, HuggingFaceCacheRunsByName) {
  const auto& fx = hub_fixtures();
  std::vector<std::pair<std::string, fs::path>> folder;
  for (const auto& f : fs::directory_iterator(fx.folder)) folder.emplace_back(f.path().filename().string(), f.path());
  lay_hf_repo(cache(), "me/demo", kCommitA, folder, {"main", "refs/pr/1"});
  lay_hf_repo(cache(), "me/tiny-GGUF", kCommitB, {{"tiny-Q8_0.gguf", fx.q8}, {"quants/tiny-Q4_0.gguf", fx.q4}});

  // A checkpoint folder by name, by revision and by commit, like the folder itself.
  const json want = greedy_tokens(fx.folder.string());
  EXPECT_EQ(greedy_tokens("me/demo"), want);
  EXPECT_EQ(greedy_tokens("me/demo@refs/pr/1"), want);
  EXPECT_EQ(greedy_tokens(std::string("hf:me/demo@") + kCommitA), want);
  // A GGUF by quantization or path in a repository of several.
  EXPECT_EQ(greedy_tokens("me/tiny-GGUF:Q8_0"), greedy_tokens(fx.q8.string()));
  EXPECT_EQ(greedy_tokens("me/tiny-GGUF:quants/tiny-Q4_0.gguf"), greedy_tokens(fx.q4.string()));

  for (const std::string cmd : {"info", "tokenize", "kv-calc"}) {
    Result r = peregrine({cmd, "me/demo"});
    if (cmd == "tokenize") r = peregrine({cmd, "me/demo", "-p", "hello"});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
  }
  const Result info = peregrine({"info", "me/tiny-GGUF:q4_0"});
  EXPECT_NE(info.out.find("q4_0"), std::string::npos) << info.out;

  const json list = list_json();
  const json* demo = entry(list, "me/demo");
  ASSERT_NE(demo, nullptr) << list.dump(2);
  EXPECT_EQ((*demo)["revision"], "main refs/pr/1");
  EXPECT_EQ((*demo)["architecture"], "llama");
  EXPECT_EQ((*demo)["type"].get<std::string>().rfind("safetensors", 0), 0u) << *demo;
  EXPECT_EQ((*demo)["files"], folder.size());
  const json* q4 = entry(list, "me/tiny-GGUF:quants/tiny-Q4_0.gguf");
  ASSERT_NE(q4, nullptr) << list.dump(2);
  EXPECT_EQ((*q4)["bytes"], fs::file_size(fx.q4));
  EXPECT_NE((*q4)["type"].get<std::string>().find("q4_0"), std::string::npos) << *q4;
  const Result table = peregrine({"list"});
  EXPECT_NE(table.out.find("me/tiny-GGUF:tiny-Q8_0.gguf"), std::string::npos) << table.out;
}

// `serve` by name answers under the repository's name, as vLLM's `serve ORG/NAME` does.
TEST_F(HubStores, ServesUnderTheName) {
  const auto& fx = hub_fixtures();
  lay_hf_repo(cache(), "me/tiny-GGUF", kCommitB, {{"tiny-Q8_0.gguf", fx.q8}});
  ServerProcess server({"me/tiny-GGUF", "-t", "1"});
  const auto client = server.client();
  for (int i = 0; i < 300; ++i) {
    const auto health = client->Get("/health");
    if (health && health->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto models = client->Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200) << server.stderr_text();
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "me/tiny-GGUF") << models->body;
  const auto done =
      client->Post("/v1/completions", R"({"model":"me/tiny-GGUF","prompt":"Once","max_tokens":4})", "application/json");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200) << done->body;
  EXPECT_EQ(server.terminate(), 0);
}

TEST_F(HubStores, MissingNamesSayHowToGetThem) {
  const auto& fx = hub_fixtures();
  lay_hf_repo(cache(), "me/tiny-GGUF", kCommitB, {{"tiny-Q8_0.gguf", fx.q8}, {"tiny-Q4_0.gguf", fx.q4}},
              {"main", "v1"});
  const auto expect_error = [](const std::vector<std::string>& args, const std::vector<std::string>& parts) {
    const Result r = peregrine(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << " in: " << r.err;
  };
  expect_error({"run", "me/absent"}, {"me/absent is not in the Hugging Face cache", "peregrine pull me/absent"});
  expect_error({"info", "me/tiny-GGUF@v2"}, {"no revision 'v2'", "it has: main, v1", "peregrine pull me/tiny-GGUF@v2"});
  expect_error({"run", "me/tiny-GGUF"},
               {"holds 2 GGUF files", "me/tiny-GGUF:QUANT", "tiny-Q4_0.gguf", "tiny-Q8_0.gguf"});
  expect_error({"bench", "me/tiny-GGUF:Q2_K"}, {"no file or GGUF quantization 'Q2_K'", "tiny-Q8_0.gguf"});
  expect_error({"serve", "ollama:absent"},
               {"ollama:absent:latest is not in Ollama's store", "ollama pull absent:latest"});
  // A path stays a path.
  expect_error({"run", "me/model.gguf"}, {"model file not found: me/model.gguf"});
}

// An Ollama store as Ollama writes it: a manifest naming its layers by digest, the model layer
// (a GGUF) after a projector layer that is a GGUF too, blobs named sha256-HEX.
void lay_ollama(const fs::path& store, const std::string& model, const std::string& tag, const fs::path& gguf,
                const std::string& model_type = "application/vnd.ollama.image.model") {
  fs::create_directories(store / "blobs");
  json layers = json::array();
  for (auto [type, file] :
       {std::pair<std::string, fs::path>{"application/vnd.ollama.image.projector", hub_fixtures().q4},
        {model_type, gguf}}) {
    const std::string hex = sha256_of(file);
    fs::copy_file(file, store / "blobs" / ("sha256-" + hex), fs::copy_options::overwrite_existing);
    layers.push_back({{"mediaType", type}, {"digest", "sha256:" + hex}, {"size", fs::file_size(file)}});
  }
  const fs::path params = store / "blobs" / "params";
  std::ofstream(params) << R"({"stop":["<|eot_id|>"]})";
  const std::string params_hex = sha256_of(params);
  fs::rename(params, store / "blobs" / ("sha256-" + params_hex));
  layers.push_back(
      {{"mediaType", "application/vnd.ollama.image.params"}, {"digest", "sha256:" + params_hex}, {"size", 23}});
  const json manifest = {{"schemaVersion", 2},
                         {"mediaType", "application/vnd.docker.distribution.manifest.v2+json"},
                         {"config",
                          {{"mediaType", "application/vnd.docker.container.image.v1+json"},
                           {"digest", "sha256:" + params_hex},
                           {"size", 23}}},
                         {"layers", layers}};
  const fs::path m = store / "manifests" / "registry.ollama.ai" / "library" / model / tag;
  fs::create_directories(m.parent_path());
  std::ofstream(m) << manifest.dump();
}

TEST_F(HubStores, OllamaStoreRunsByName) {
  const auto& fx = hub_fixtures();
  lay_ollama(ollama(), "tiny", "latest", fx.q8);
  lay_ollama(ollama(), "tiny", "small", fx.q4);
  EXPECT_EQ(greedy_tokens("ollama:tiny"), greedy_tokens(fx.q8.string()));
  EXPECT_EQ(greedy_tokens("ollama:tiny:small"), greedy_tokens(fx.q4.string()));
  EXPECT_EQ(greedy_tokens("ollama:registry.ollama.ai/library/tiny:small"), greedy_tokens(fx.q4.string()));

  const Result missing_tag = peregrine({"run", "ollama:tiny:7b"});
  EXPECT_EQ(missing_tag.exit_code, 2);
  EXPECT_NE(missing_tag.err.find("its tags there: latest, small"), std::string::npos) << missing_tag.err;

  const json list = list_json();
  const json* tiny = entry(list, "ollama:tiny:small");
  ASSERT_NE(tiny, nullptr) << list.dump(2);
  EXPECT_EQ((*tiny)["source"], "ollama");
  EXPECT_EQ((*tiny)["architecture"], "llama");
  EXPECT_EQ((*tiny)["bytes"], fs::file_size(fx.q4));
  EXPECT_EQ((*tiny)["commit"], "sha256:" + sha256_of(fx.q4));
}

TEST_F(HubStores, BrokenOllamaEntriesNameTheManifest) {
  const auto& fx = hub_fixtures();
  lay_ollama(ollama(), "tensors", "latest", fx.q8, "application/vnd.ollama.image.tensor");
  lay_ollama(ollama(), "gone", "latest", fx.q8);
  fs::remove(ollama() / "blobs" / ("sha256-" + sha256_of(fx.q8)));
  lay_ollama(ollama(), "short", "latest", fx.q4);
  fs::resize_file(ollama() / "blobs" / ("sha256-" + sha256_of(fx.q4)), 1000);
  for (auto [name, problem] : {std::pair{"ollama:tensors", "stored as tensor layers"},
                               {"ollama:gone", "is missing from"},
                               {"ollama:short", "an interrupted pull?"}}) {
    const Result r = peregrine({"run", name});
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find(problem), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::string(name).substr(7)), std::string::npos) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
  }
  // list still shows them, with the problem.
  const json list = list_json();
  const json* gone = entry(list, "ollama:gone:latest");
  ASSERT_NE(gone, nullptr);
  EXPECT_NE((*gone)["type"].get<std::string>().find("is missing from"), std::string::npos) << *gone;
}

}  // namespace
}  // namespace peregrine::test
