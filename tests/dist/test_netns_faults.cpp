// Faults across "hosts" (scripts/netns-cluster.sh) against `serve` with streams in flight:
// a rank killed, frozen past the limit, or its host cut off ends every stream with an error event
// and finish_reason "error" within the stated bound (the rank timeout, 5 s by default, plus a
// second), /health and new requests get 503, the job exits non-zero and no rank is left; a short
// hiccup (the link down for 2 s, 5% of frames lost) and a step longer than the rank timeout are
// ridden out. The links have 1 ms of latency each way, so a TP=2 token of stories260K takes a few
// tens of milliseconds and streams of a few hundred tokens are still running when the fault comes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "dist/netns_cluster.h"

namespace peregrine::test {
namespace {

std::string stories_bin() { return shared_file("models/stories260K/stories260K.bin").string(); }
std::string stories_tok() { return shared_file("models/stories260K/tok512.bin").string(); }

constexpr int kRankTimeout = 5;  // serve's default --rank-timeout
const std::vector<std::string> kPrompts = {"Once upon a time", "The cat"};

class FaultsAcrossHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = NetnsCluster::make("pf", 2, "--delay 1", why_not_).release(); }
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
NetnsCluster* FaultsAcrossHosts::cluster_ = nullptr;
std::string FaultsAcrossHosts::why_not_;

std::vector<std::string> serve_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {stories_bin(), "--tokenizer", stories_tok(), "-t", "1", "--tp", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Streams in flight: one per prompt, each `max_tokens` long, started at once.
struct Streams {
  std::vector<StreamResult> results;
  std::vector<Clock::time_point> ended;
  std::vector<std::atomic<size_t>> events;
  std::vector<std::thread> threads;

  Streams(const NetnsCluster& c, int port, int max_tokens)
      : results(kPrompts.size()), ended(kPrompts.size()), events(kPrompts.size()) {
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      threads.emplace_back([&, i, port, max_tokens] {
        results[i] = stream_completion(c, port, completion_body(kPrompts[i], max_tokens, true),
                                       std::chrono::seconds(90), [&, i](size_t n) { events[i] = n; });
        ended[i] = Clock::now();
      });
    }
  }
  // True once every stream has sent `n` events (tokens are flowing).
  bool flowing(size_t n, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      bool all = true;
      for (auto& e : events) all = all && e.load() >= n;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void join() {
    for (auto& t : threads) t.join();
    threads.clear();
  }
  ~Streams() {
    for (auto& t : threads) t.join();
  }
};

// The outcome every fatal fault must have. `cause` is a piece of the log naming it.
void expect_failed_cleanly(const NetnsCluster& c, ClusterServer& server, Streams& streams, Clock::time_point fault,
                           const std::string& cause, const std::function<void()>& heal = {}) {
  streams.join();
  for (size_t i = 0; i < streams.results.size(); ++i) {
    const StreamResult& s = streams.results[i];
    EXPECT_EQ(s.status, 200);
    EXPECT_FALSE(s.timed_out) << "a stream hung";
    EXPECT_EQ(s.finish_reason, "error") << "stream " << i << " text: " << s.text;
    EXPECT_NE(s.error.find("a process of the layout failed"), std::string::npos) << s.error;
    EXPECT_TRUE(s.done) << "the stream must still end with [DONE]";
    const double after = std::chrono::duration<double>(streams.ended[i] - fault).count();
    EXPECT_LT(after, kRankTimeout + 2.0) << "noticed too late";
  }
  // Right after: not healthy, and a new request is refused (503), until the job is gone.
  const HttpExchange health = http_exchange(c, server.port(), "GET", "/health", "", std::chrono::seconds(5));
  if (health.status != 0) {
    EXPECT_EQ(health.status, 503) << health.body;
  }
  const HttpExchange fresh = http_exchange(c, server.port(), "POST", "/v1/completions",
                                           completion_body("Once", 4, false), std::chrono::seconds(5));
  if (fresh.status != 0) {
    EXPECT_EQ(fresh.status, 503) << fresh.body;
  }
  // Every rank ends: rank 0 by MPI_Abort, the others by the launcher or, cut off from it and from
  // rank 0, by themselves (rank 0 silent past the limit, then at most 5 s in MPI_Abort).
  std::vector<int> alive;
  for (int i = 0; i < 200 && !(alive = server.ranks_alive()).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(alive.empty()) << "rank " << alive.front() << " outlived the job";
  if (heal) heal();  // a launcher cut off from a host waits for it (its daemon there is gone by now)
  const std::optional<int> code = server.wait_exit(std::chrono::seconds(20));
  ASSERT_TRUE(code.has_value()) << "the job did not end: " << server.err();
  EXPECT_NE(*code, 0);
  EXPECT_NE(*code, 124) << "ended by the test's timeout";
  const std::string err = server.err();
  EXPECT_NE(err.find(cause), std::string::npos) << err;
}

TEST_F(FaultsAcrossHosts, AKilledRankEndsEveryStreamWithAnError) {
  ClusterServer server(*cluster_, 2, serve_args());
  ASSERT_GT(server.port(), 0) << server.err();
  Streams streams(*cluster_, server.port(), 400);
  ASSERT_TRUE(streams.flowing(10, std::chrono::seconds(30))) << server.err();
  const auto fault = Clock::now();
  kill(server.rank_pid(1), SIGKILL);
  // Known race (docs/design/partial-models-and-several-processes.md): Open MPI's own teardown after a
  // killed process sometimes stops rank 0 before its engine ends the streams (about one run in
  // three here); the streams are then cut with the job, which ends non-zero naming the dead rank.
  streams.join();
  const bool cut = std::any_of(streams.results.begin(), streams.results.end(),
                               [](const StreamResult& s) { return s.finish_reason.empty() && !s.done; });
  if (cut) {
    for (const StreamResult& s : streams.results) EXPECT_FALSE(s.timed_out) << "a stream hung";
    const std::optional<int> code = server.wait_exit(std::chrono::seconds(20));
    ASSERT_TRUE(code.has_value()) << server.err();
    EXPECT_NE(*code, 0);
    EXPECT_NE(server.err().find("process rank 1"), std::string::npos) << server.err();
    EXPECT_TRUE(server.ranks_alive().empty());
    return;
  }
  expect_failed_cleanly(*cluster_, server, streams, fault, "closed its heartbeat connection: its process ended");
}

TEST_F(FaultsAcrossHosts, AFrozenRankIsNoticedWithinTheRankTimeout) {
  ClusterServer server(*cluster_, 2, serve_args());
  ASSERT_GT(server.port(), 0) << server.err();
  Streams streams(*cluster_, server.port(), 400);
  ASSERT_TRUE(streams.flowing(10, std::chrono::seconds(30))) << server.err();
  const pid_t rank1 = server.rank_pid(1);
  const auto fault = Clock::now();
  kill(rank1, SIGSTOP);  // alive to the launcher, silent to rank 0
  expect_failed_cleanly(*cluster_, server, streams, fault, "rank 1 (at 10.77.0.2) sent no heartbeat");
  kill(rank1, SIGKILL);  // should it have outlived the job (the test above reports it)
}

TEST_F(FaultsAcrossHosts, AHostCutOffIsNoticedWithinTheRankTimeout) {
  ClusterServer server(*cluster_, 2, serve_args());
  ASSERT_GT(server.port(), 0) << server.err();
  Streams streams(*cluster_, server.port(), 400);
  ASSERT_TRUE(streams.flowing(10, std::chrono::seconds(30))) << server.err();
  const auto fault = Clock::now();
  cluster_->link(2, false);
  expect_failed_cleanly(*cluster_, server, streams, fault, "rank 1 (at 10.77.0.2) sent no heartbeat",
                        [&] { cluster_->link(2, true); });
  cluster_->link(2, true);
}

// A short hiccup: every stream still completes with one process's tokens.
void expect_ridden_out(const NetnsCluster& c, ClusterServer& server, const std::function<void()>& during,
                       int max_tokens) {
  std::vector<std::string> want;
  {
    Streams clean(c, server.port(), max_tokens);
    clean.join();
    for (const auto& s : clean.results) want.push_back(s.text);
  }
  Streams streams(c, server.port(), max_tokens);
  ASSERT_TRUE(streams.flowing(5, std::chrono::seconds(30))) << server.err();
  during();
  streams.join();
  for (size_t i = 0; i < streams.results.size(); ++i) {
    EXPECT_EQ(streams.results[i].finish_reason, "length") << streams.results[i].error;
    EXPECT_EQ(streams.results[i].text, want[i]);
  }
  EXPECT_EQ(http_exchange(c, server.port(), "GET", "/health", "", std::chrono::seconds(5)).status, 200);
  EXPECT_TRUE(server.running()) << server.err();
}

TEST_F(FaultsAcrossHosts, ALinkDownForTwoSecondsIsRiddenOut) {
  ClusterServer server(*cluster_, 2, serve_args());
  ASSERT_GT(server.port(), 0) << server.err();
  expect_ridden_out(
      *cluster_, server,
      [&] {
        cluster_->link(2, false);
        std::this_thread::sleep_for(std::chrono::seconds(2));
        cluster_->link(2, true);
      },
      60);
}

TEST_F(FaultsAcrossHosts, FivePercentLossIsRiddenOut) {
  std::string why;
  auto lossy = NetnsCluster::make("pq", 2, "--loss 5", why);
  ASSERT_NE(lossy, nullptr) << why;
  ClusterServer server(*lossy, 2, serve_args());
  ASSERT_GT(server.port(), 0) << server.err();
  expect_ridden_out(
      *lossy, server, [] {}, 40);
}

TEST_F(FaultsAcrossHosts, AStepLongerThanTheRankTimeoutIsNoFailure) {
  // 1 Mbit/s links: a 300-token prompt's all-reduces take seconds, the rank timeout is 1 s.
  std::string why;
  auto slow = NetnsCluster::make("ps", 2, "--rate 1", why);
  ASSERT_NE(slow, nullptr) << why;
  ClusterServer server(*slow, 2, serve_args({"--rank-timeout", "1"}));
  ASSERT_GT(server.port(), 0) << server.err();
  std::string prompt;
  for (int i = 0; i < 30; ++i) prompt += "Once upon a time there was a cat. ";
  const auto t0 = Clock::now();
  const StreamResult s =
      stream_completion(*slow, server.port(), completion_body(prompt, 4, true), std::chrono::seconds(120));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(s.finish_reason, "length") << s.error << server.err();
  EXPECT_GT(seconds, 2.0) << "the prompt step was not slow enough to test anything";
  EXPECT_TRUE(server.running()) << server.err();
}

}  // namespace
}  // namespace peregrine::test
