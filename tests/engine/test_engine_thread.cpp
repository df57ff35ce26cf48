#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::stories;

TEST(Engine, ManyThreadsSubmitAndCancelAndEachRequestMatchesItsSoloRun) {
  auto& s = stories();
  std::vector<Request> requests;
  for (int i = 0; i < 24; ++i) {
    Request r;
    r.prompt = s.tokenizer.encode(i % 2 ? "Once upon a time" : "The little dog", true, false);
    r.prompt.push_back(static_cast<TokenId>(300 + i));
    r.max_tokens = 8 + i % 5;
    r.sampling.temperature = i % 3 ? 0.7f : 0.f;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.stop = {"zzz"};
    requests.push_back(r);
  }
  EngineConfig cfg;
  cfg.kv_blocks = 16;
  cfg.scheduler.max_seqs = 4;
  std::mutex mu;
  Recorder rec;
  std::vector<RequestId> ids(requests.size());
  {
    Engine engine(s.model, &s.tokenizer, cfg);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = static_cast<size_t>(t); i < requests.size(); i += 4) {
          ids[i] = engine.submit(requests[i], [&](const RequestEvent& ev) {
            std::lock_guard<std::mutex> lock(mu);
            rec(ev);
          });
        }
      });
    }
    for (auto& th : threads) th.join();
    engine.cancel(ids[0]);
    engine.cancel(987654);  // unknown: ignored
    engine.wait_idle();
    const EngineStats st = engine.stats();
    EXPECT_EQ(st.running + st.waiting, 0);
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.finished, static_cast<int64_t>(requests.size()));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Outcome& got = rec.outcomes[ids[i]];
    EXPECT_EQ(got.n_finish_events, 1) << i;
    const Outcome ref = test::run_alone(s.model, &s.tokenizer, requests[i]);
    if (got.finish == RequestFinish::Cancelled) {
      EXPECT_EQ(i, 0u);
      continue;
    }
    EXPECT_EQ(got.tokens, ref.tokens) << i;
    EXPECT_EQ(got.text, ref.text) << i;
    EXPECT_EQ(got.finish, ref.finish) << i;
  }
}

// The destructor "finishes the step in progress, then stops": destroying the engine in the
// middle of a long generation returns within a step or so, the request gets no more events
// (none ends it, none arrives after), and its remaining tokens are never generated.
TEST(Engine, DestroyingABusyEngineStopsCleanly) {
  auto& s = stories();
  EngineConfig cfg;
  cfg.kv_blocks = 16;
  constexpr int kMaxTokens = 200;
  std::atomic<int> tokens{0}, finishes{0}, events_after{0};
  std::atomic<bool> destroyed{false};
  std::chrono::steady_clock::time_point destroy_start;
  {
    Engine engine(s.model, &s.tokenizer, cfg);
    Request r;
    r.prompt = {1, 400};
    r.max_tokens = kMaxTokens;
    r.ignore_eos = true;
    engine.submit(r, [&](const RequestEvent& e) {
      if (destroyed.load()) ++events_after;
      tokens += static_cast<int>(e.tokens.size());
      if (e.finish != RequestFinish::None) ++finishes;
    });
    // Busy: the generation has started.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (tokens.load() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_GT(tokens.load(), 0) << "the generation never started";
    destroy_start = std::chrono::steady_clock::now();
  }
  destroyed = true;
  const double destroy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - destroy_start).count();
  const int tokens_at_destruction = tokens.load();
  EXPECT_LT(destroy_s, 5.0) << "the destructor waited for more than the step in progress";
  EXPECT_LT(tokens_at_destruction, kMaxTokens) << "the engine generated the whole request before stopping";
  EXPECT_EQ(finishes.load(), 0) << "a request pending at destruction gets no final event";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(events_after.load(), 0);
  EXPECT_EQ(tokens.load(), tokens_at_destruction) << "tokens arrived after the destructor returned";
}


// Engine::interleave: the slice runs on the engine thread, once per loop (idle or serving), until it
// returns false; one at a time; serving goes on meanwhile (the web page's lab runs its steps so).
TEST(Engine, InterleavedSlicesRunBetweenStepsUntilTheySayDone) {
  auto& s = stories();
  EngineConfig cfg;
  cfg.kv_blocks = 16;
  Engine engine(s.model, &s.tokenizer, cfg);
  std::atomic<int> calls{0};
  std::atomic<bool> finished{false};
  std::thread::id slice_thread, event_thread;
  std::mutex mu;
  ASSERT_TRUE(engine.interleave([&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      slice_thread = std::this_thread::get_id();
    }
    return ++calls < 5;
  }));
  Request r;
  r.prompt = s.tokenizer.encode("Once upon a time", true, false);
  r.max_tokens = 12;
  r.ignore_eos = true;
  engine.submit(r, [&](const RequestEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    event_thread = std::this_thread::get_id();
    if (ev.finish != RequestFinish::None) finished = true;
  });
  engine.wait_idle();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls.load() < 5 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(calls.load(), 5);
  EXPECT_TRUE(finished.load());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(slice_thread, event_thread) << "slices run on the engine thread";
  // Done: the next one is taken (the flag clears right after the slice's last call returns).
  bool taken = false;
  for (int i = 0; i < 1000 && !(taken = engine.interleave([] { return false; })); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(taken);
}

TEST(Engine, OnlyOneSliceIsHeldAtATime) {
  auto& s = stories();
  EngineConfig cfg;
  cfg.kv_blocks = 16;
  Engine engine(s.model, &s.tokenizer, cfg);
  std::atomic<bool> release{false};
  ASSERT_TRUE(engine.interleave([&] { return !release.load(); }));
  EXPECT_FALSE(engine.interleave([] { return false; }));
  release = true;
}

}  // namespace
}  // namespace peregrine
