// The web page's lab (docs/api.md, "The lab") through the real server: every experiment on the
// demo model and a synthetic model, its answers checked against what they must be (the page's
// matrices, identical tokens, finish order, the full softmax), and its bounds: bad input is 400
// before any work, a second run at once is 429, --no-webui refuses it, the key guards it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/matmul_timing.h"
#include "server_process.h"

namespace peregrine::server {
namespace {

using nlohmann::json;
using test::ServerProcess;

const std::vector<std::string> kFlags = {"-t", "1", "--max-seqs", "8", "--kv-cache-memory", "32MiB"};

httplib::Result post(httplib::Client& c, const std::string& path, const json& body) {
  return c.Post(path, body.dump(), "application/json");
}

json post_ok(httplib::Client& c, const std::string& path, const json& body) {
  auto r = post(c, path, body);
  EXPECT_TRUE(r) << path;
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << path << " " << r->body;
  return json::parse(r->body);
}

class Lab : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<ServerProcess>(kFlags); }
  static void TearDownTestSuite() { server_.reset(); }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> Lab::server_;

TEST_F(Lab, BadInputIs400BeforeAnyWorkAndUnknownExperimentsAre404) {
  auto c = server_->client();
  const std::vector<std::pair<std::string, json>> bad = {
      {"/v1/lab/matmul", {{"m", 0}}},
      {"/v1/lab/matmul", {{"m", 2000}}},
      {"/v1/lab/matmul", {{"m", 1024}, {"k", 1024}, {"n", 1024}}},
      {"/v1/lab/matmul", {{"m", "many"}}},
      {"/v1/lab/kv-cache", {{"tokens", 0}}},
      {"/v1/lab/kv-cache", {{"tokens", 100000}}},
      {"/v1/lab/steps", {{"prompt_tokens", 65}}},
      {"/v1/lab/batching", {{"outputs", {1}}}},
      {"/v1/lab/batching", {{"outputs", {64, 64, 64, 64}}}},
      {"/v1/lab/batching", {{"slots", 9}}},
      {"/v1/lab/speculative", {{"proposer", "oracle"}}},
      {"/v1/lab/speculative", {{"k", 9}}},
      {"/v1/lab/attention", {{"layer", 99}}},
      {"/v1/lab/attention", {{"position", 100000}}},
      {"/v1/lab/kv-sizes", {{"batch", 0}}},
      {"/v1/lab/plan", {{"device", "abacus"}}},
      {"/v1/lab/plan", {{"disaggregate", "x"}}},
  };
  for (const auto& [path, body] : bad) {
    auto r = post(*c, path, body);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << " " << body.dump() << " -> " << r->body;
  }
  auto unknown = post(*c, "/v1/lab/nope", json::object());
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto get = c->Get("/v1/lab/matmul");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  auto text = c->Post("/v1/lab/matmul", "{}", "text/plain");
  ASSERT_TRUE(text);
  EXPECT_EQ(text->status, 415);
}

TEST_F(Lab, InfoAndTheArithmeticExperiments) {
  auto c = server_->client();
  auto info = c->Get("/v1/lab");
  ASSERT_TRUE(info);
  ASSERT_EQ(info->status, 200);
  const json i = json::parse(info->body);
  EXPECT_TRUE(i["engine_runs"].get<bool>());
  EXPECT_NE(std::find(i["proposers"].begin(), i["proposers"].end(), "ngram"), i["proposers"].end());
  EXPECT_NE(std::find(i["proposers"].begin(), i["proposers"].end(), "draft"), i["proposers"].end());  // the demo's

  const json s = post_ok(*c, "/v1/lab/kv-sizes", {{"context", 256}, {"batch", 2}});
  const json& mha = s["model"]["layouts"][0];
  EXPECT_EQ(mha["layout"], "MHA");
  const double per_token = 2.0 * i["layers"].get<double>() * i["heads"].get<double>() * i["head_dim"].get<double>() * 2;
  EXPECT_DOUBLE_EQ(mha["bytes_per_token"].get<double>(), per_token);  // f16 cache
  EXPECT_DOUBLE_EQ(mha["bytes"].get<double>(), per_token * 512);
  EXPECT_EQ(mha["longest_context"].get<int64_t>(),
            static_cast<int64_t>(std::floor(s["server_kv_bytes"].get<double>() / (2 * per_token))));
  const json& ex = s["example"]["layouts"];
  EXPECT_DOUBLE_EQ(ex[0]["bytes"].get<double>(), 4.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(ex[1]["bytes"].get<double>(), 1.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(ex[2]["bytes"].get<double>(), 128.0 * (1 << 20));

  const json p = post_ok(*c, "/v1/lab/plan", {{"model", "llama-3-70b"}, {"device", "h100"}, {"tp", 8}});
  EXPECT_EQ(p["layout"]["devices"], 8);
  EXPECT_TRUE(p["layout"]["fits"].get<bool>());
  EXPECT_GT(p["layouts_that_fit"].size(), 0u);
  const json loaded = post_ok(*c, "/v1/lab/plan", {{"disaggregate", "2:2"}});
  EXPECT_TRUE(loaded.contains("prefill_pool") && loaded.contains("decode_pool"));
}

TEST_F(Lab, MatmulMultipliesThePagesMatricesAndStepsSitEitherSideOfTheRidge) {
  auto c = server_->client();
  const json m = post_ok(*c, "/v1/lab/matmul", {{"m", 24}, {"k", 64}, {"n", 40}, {"seed", 7}});
  // The same generator the page runs in JavaScript: the checksum is that product's.
  const std::vector<float> a = lcg_floats(24 * 64, 7), w = lcg_floats(40 * 64, 8);
  std::vector<float> y(24 * 40);
  naive_matmul(w.data(), a.data(), y.data(), 24, 40, 64);
  double sum = 0;
  for (float v : y) sum += v;
  EXPECT_NEAR(m["checksum"].get<double>(), sum, 1e-9 * (1 + std::fabs(sum)));
  EXPECT_FLOAT_EQ(m["sample"][3].get<float>(), y[3]);
  EXPECT_LT(m["max_abs_diff_tuned_vs_naive"].get<double>(), 1e-4);
  ASSERT_EQ(m["points"].size(), 3u);  // naive, tuned f32, tuned q8_0
  for (const json& p : m["points"]) EXPECT_GT(p["gflops"].get<double>(), 0) << p.dump();

  const json st = post_ok(*c, "/v1/lab/steps", {{"prompt_tokens", 40}});
  ASSERT_EQ(st["points"].size(), 2u);
  EXPECT_EQ(st["points"][0]["phase"], "prefill");
  EXPECT_EQ(st["points"][0]["tokens"], 40);
  EXPECT_EQ(st["points"][1]["phase"], "decode");
  EXPECT_GT(st["points"][0]["intensity"].get<double>(), 10 * st["points"][1]["intensity"].get<double>());
}

TEST_F(Lab, EngineRunsShowWhatTheChapterSays) {
  auto c = server_->client();
  const json kv = post_ok(*c, "/v1/lab/kv-cache", {{"tokens", 40}});
  EXPECT_TRUE(kv["identical"].get<bool>());
  ASSERT_EQ(kv["with_cache"]["per_token"].size(), 40u);
  ASSERT_EQ(kv["without_cache"]["per_token"].size(), 40u);
  EXPECT_EQ(kv["with_cache"]["tokens"], kv["without_cache"]["tokens"]);

  const json b = post_ok(*c, "/v1/lab/batching", {{"outputs", {20, 2, 10, 3}}, {"slots", 2}});
  const json& st = b["static"];
  const json& co = b["continuous"];
  // Static: the second batch starts only after the first's longest request; continuous fills the
  // freed slot at once, so it needs fewer steps and the short requests finish sooner.
  EXPECT_LT(co["steps"].get<int64_t>(), st["steps"].get<int64_t>());
  EXPECT_LT(co["finish"][3]["step"].get<int64_t>(), st["finish"][3]["step"].get<int64_t>());
  EXPECT_LT(co["finish"][1]["step"].get<int64_t>(), co["finish"][0]["step"].get<int64_t>());
  EXPECT_EQ(st["grid"].size(), static_cast<size_t>(st["steps"].get<int64_t>()));
  EXPECT_GT(co["slot_use"].get<double>(), st["slot_use"].get<double>());

  for (const char* proposer : {"ngram", "draft"}) {
    const json sp = post_ok(*c, "/v1/lab/speculative", {{"proposer", proposer}, {"k", 3}, {"tokens", 32}});
    EXPECT_TRUE(sp["identical"].get<bool>()) << proposer;
    int64_t emitted = 0, drafted = 0;
    for (const json& pass : sp["passes"]) {
      emitted += static_cast<int64_t>(pass["emitted"].size());
      drafted += static_cast<int64_t>(pass["proposed"].size());
      EXPECT_LE(pass["accepted"].get<size_t>(), pass["proposed"].size());
      // A pass gives the accepted drafts and one token of the model's (but the request's last).
      EXPECT_LE(pass["emitted"].size(), pass["accepted"].get<size_t>() + 1);
    }
    EXPECT_EQ(emitted, 32) << proposer;
    EXPECT_GT(drafted, 0) << proposer;
    EXPECT_LT(sp["passes"].size(), 32u) << proposer;  // some drafts were accepted
    EXPECT_EQ(sp["acceptance"].size(), 3u);
  }

  const json at = post_ok(*c, "/v1/lab/attention", {{"layer", 1}, {"head", 1}, {"position", 70}, {"tile", 16}});
  EXPECT_EQ(at["position"], 70);
  EXPECT_EQ(at["tiles"].size(), 5u);  // keys 0..70 in tiles of 16
  EXPECT_LT(at["max_abs_diff_online"].get<double>(), 1e-9);
  EXPECT_LT(at["max_abs_diff_kernel"].get<double>(), at["tolerance"].get<double>());
  double total = 0;
  for (const json& w : at["weights"]) total += w.get<double>();
  EXPECT_NEAR(total, 1.0, 1e-9);
}

TEST_F(Lab, OneRunAtATimeTheSecondGets429) {
  // Three large multiplies at once: the lab takes one, the others are refused while it runs.
  const json big = {{"m", 512}, {"k", 512}, {"n", 512}};
  std::vector<std::future<int>> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(std::async(std::launch::async, [&] {
      auto c = server_->client();
      auto r = post(*c, "/v1/lab/matmul", big);
      return r ? r->status : -1;
    }));
  }
  int ok = 0, busy = 0;
  for (auto& f : runs) {
    const int status = f.get();
    ok += status == 200;
    busy += status == 429;
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1);
  EXPECT_EQ(ok + busy, 3);
}

TEST(LabAccess, NoWebuiRefusesItAndTheKeyGuardsIt) {
  ServerProcess off([] {
    std::vector<std::string> f = kFlags;
    f.push_back("--no-webui");
    return f;
  }());
  auto c = off.client();
  EXPECT_EQ(c->Get("/v1/lab")->status, 404);
  EXPECT_EQ(post(*c, "/v1/lab/matmul", json::object())->status, 404);
  EXPECT_EQ(post(*c, "/v1/lab/kv-sizes", json::object())->status, 404);

  ServerProcess keyed([] {
    std::vector<std::string> f = kFlags;
    f.insert(f.end(), {"--api-key", "k1"});
    return f;
  }());
  auto k = keyed.client();
  EXPECT_EQ(k->Get("/v1/lab")->status, 401);
  EXPECT_EQ(post(*k, "/v1/lab/attention", json::object())->status, 401);
  k->set_bearer_token_auth("k1");
  EXPECT_EQ(k->Get("/v1/lab")->status, 200);
}

// A synthetic model with grouped KV heads: the experiments are not the demo model's alone.
TEST(LabSynthetic, EveryExperimentRunsOnAGqaModel) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "peregrine-lab-tiny-qwen2.gguf";
  const std::string synth = std::string(PEREGRINE_BINARY_DIR) +
                            "/peregrine synth --preset tiny-qwen2 --type q8_0 --seed 3 -o " + file.string() +
                            " >/dev/null 2>&1";
  ASSERT_EQ(std::system(synth.c_str()), 0);
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.begin(), file.string());
  ServerProcess server(flags);
  auto c = server.client();
  const json info = json::parse(c->Get("/v1/lab")->body);
  EXPECT_LT(info["kv_heads"].get<int64_t>(), info["heads"].get<int64_t>());
  const json s = post_ok(*c, "/v1/lab/kv-sizes", {{"context", 128}});
  EXPECT_EQ(s["model"]["layouts"][1]["kv_heads"], info["kv_heads"]);  // its own GQA layout
  EXPECT_TRUE(post_ok(*c, "/v1/lab/kv-cache", {{"tokens", 12}})["identical"].get<bool>());
  EXPECT_TRUE(post_ok(*c, "/v1/lab/speculative", {{"tokens", 12}})["identical"].get<bool>());
  const json b = post_ok(*c, "/v1/lab/batching", {{"outputs", {6, 2, 4}}, {"slots", 2}});
  EXPECT_LE(b["continuous"]["steps"].get<int64_t>(), b["static"]["steps"].get<int64_t>());
  EXPECT_EQ(post_ok(*c, "/v1/lab/steps", {{"prompt_tokens", 16}})["points"].size(), 2u);
  const json at = post_ok(*c, "/v1/lab/attention", {{"layer", 1}, {"head", 3}, {"position", 40}});
  EXPECT_LT(at["max_abs_diff_kernel"].get<double>(), at["tolerance"].get<double>());
  post_ok(*c, "/v1/lab/plan", json::object());
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace peregrine::server
