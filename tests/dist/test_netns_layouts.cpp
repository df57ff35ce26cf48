// Every layout with one rank per "host" (a network namespace of scripts/netns-cluster.sh; the ranks
// talk TCP over veth links, never shared memory): the same greedy tokens as one process, through
// `run` and through `serve` with streaming clients.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "dist/netns_cluster.h"

namespace peregrine::test {
namespace {

std::string stories_bin() { return shared_file("models/stories260K/stories260K.bin").string(); }
std::string stories_tok() { return shared_file("models/stories260K/tok512.bin").string(); }

struct Layout {
  int np;
  std::vector<std::string> flags;
  std::string name() const {
    std::string s;
    for (const auto& f : flags) s += f + " ";
    return s;
  }
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {{2, {"--tp", "2"}},
                                          {2, {"--pp", "2"}},
                                          {4, {"--tp", "2", "--pp", "2"}},
                                          {2, {"--disaggregate", "1:1"}},
                                          {3, {"--disaggregate", "1:2"}}};
  return all;
}

class AcrossHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = NetnsCluster::make("pl", 4, "", why_not_).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "no cluster of network namespaces on this machine: " << why_not_;
  }
  static NetnsCluster* cluster_;
  static std::string why_not_;
};
NetnsCluster* AcrossHosts::cluster_ = nullptr;
std::string AcrossHosts::why_not_;

std::vector<int> tokens_of(const Result& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("tokens")) return {};
  return j["tokens"].get<std::vector<int>>();
}

TEST_F(AcrossHosts, RanksRunInSeparateNamespacesOverTcp) {
  // Each rank prints its network namespace: as many different ones as ranks.
  const std::string cmd = cluster_->mpirun(3) + " sh -c 'readlink /proc/self/ns/net' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::set<std::string> namespaces;
  char line[256];
  while (fgets(line, sizeof line, p) != nullptr) {
    if (std::string(line).rfind("net:[", 0) == 0) namespaces.insert(line);
  }
  EXPECT_EQ(pclose(p), 0);
  EXPECT_EQ(namespaces.size(), 3u);
}

TEST_F(AcrossHosts, EveryLayoutGivesOneProcesssGreedyTokensThroughRun) {
  const std::vector<std::string> run = {
      "run",    stories_bin(), "--tokenizer", stories_tok(), "-p", "Once upon a time", "-n", "32",
      "--temp", "0",           "--json",      "-t",          "1"};
  const std::vector<int> want = tokens_of(peregrine(run));
  ASSERT_EQ(want.size(), 32u);
  for (const Layout& l : layouts()) {
    std::vector<std::string> args = run;
    args.insert(args.end(), l.flags.begin(), l.flags.end());
    EXPECT_EQ(tokens_of(cluster_run(*cluster_, l.np, args)), want) << l.name();
  }
}

TEST_F(AcrossHosts, ExpertParallelismGivesOneProcesssGreedyTokens) {
  const auto dir = scratch_dir("netns-ep-" + std::to_string(::getpid()));
  const std::string moe = (dir / "tiny-mixtral.gguf").string();
  ASSERT_EQ(peregrine({"synth", "--preset", "tiny-mixtral", "--type", "q8_0", "-o", moe}).exit_code, 0);
  // Exact arithmetic (f32 activations and KV), as mpi_engine_test's expert-parallel cases.
  const std::vector<std::string> run = {"run", moe, "-p", "hello", "-n", "12", "--temp", "0", "--json", "-t", "1"};
  std::vector<int> want = tokens_of(peregrine(run));
  ASSERT_EQ(want.size(), 12u);
  std::vector<std::string> args = run;
  for (const char* f : {"--tp", "2", "--ep"}) args.push_back(f);
  EXPECT_EQ(tokens_of(cluster_run(*cluster_, 2, args)), want);
}

TEST_F(AcrossHosts, EveryLayoutServesOneProcesssTokensToStreamingClients) {
  // One process's completions first (the reference), then each layout's, three streams at once.
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily and Ben"};
  auto completions = [&](int np, const std::vector<std::string>& flags) {
    std::vector<std::string> args = {stories_bin(), "--tokenizer", stories_tok(), "-t", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    ClusterServer server(*cluster_, np, args);
    std::vector<StreamResult> out(prompts.size());
    if (server.port() == 0) {
      ADD_FAILURE() << "serve did not come up: " << server.err();
      return out;
    }
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] {
        out[i] = stream_completion(*cluster_, server.port(), completion_body(prompts[i], 24, true),
                                   std::chrono::seconds(60));
      });
    }
    for (auto& t : clients) t.join();
    return out;
  };
  const std::vector<StreamResult> want = completions(1, {});
  for (const StreamResult& s : want) {
    ASSERT_EQ(s.finish_reason, "length") << s.error;
    ASSERT_FALSE(s.text.empty());
  }
  for (const Layout& l : layouts()) {
    const std::vector<StreamResult> got = completions(l.np, l.flags);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].status, 200) << l.name();
      EXPECT_EQ(got[i].text, want[i].text) << l.name() << got[i].error;
      EXPECT_EQ(got[i].finish_reason, "length") << l.name();
      EXPECT_TRUE(got[i].done) << l.name();
    }
  }
}

}  // namespace
}  // namespace peregrine::test
