// Priority preemption end to end (stories260K): a high-priority request that arrives while a
// low-priority one holds the KV cache runs at once; the preempted request is recomputed later
// and still ends with exactly the tokens it gets alone.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "engine_test_util.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::run_alone;
using test::stories;

// Events reach the Recorder through the request callbacks only.
void drain(EngineCore& core) {
  for (int i = 0; i < 100000 && core.has_work(); ++i) core.step();
}

Request make(std::vector<TokenId> prompt, int64_t max_tokens, int32_t priority, float temperature) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.priority = priority;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = 7;
  return r;
}

TEST(EnginePriority, PreemptedRequestFinishesWithTheTokensItGetsAlone) {
  auto& s = stories();
  for (float temperature : {0.f, 0.9f}) {
    std::vector<TokenId> low_prompt{1}, high_prompt{1};
    for (int i = 0; i < 20; ++i) low_prompt.push_back(static_cast<TokenId>(100 + 7 * i));
    for (int i = 0; i < 89; ++i) high_prompt.push_back(static_cast<TokenId>(50 + 5 * i));
    const Request low = make(low_prompt, 60, 0, temperature);    // up to 81 tokens: 6 blocks
    const Request high = make(high_prompt, 20, 1, temperature);  // 90-token prompt (6 blocks), up to 7
    const Outcome low_alone = run_alone(s.model, nullptr, low, 8);
    const Outcome high_alone = run_alone(s.model, nullptr, high, 8);

    EngineConfig cfg;
    cfg.kv_blocks = 8;  // 128 tokens: not both at once
    cfg.prefix_caching = false;
    EngineCore core(s.model, nullptr, cfg);
    std::vector<RequestId> finish_order;
    Recorder rec;
    auto record = [&](const RequestEvent& ev) {
      rec(ev);
      if (ev.finish != RequestFinish::None) finish_order.push_back(ev.id);
    };
    const RequestId low_id = core.add_request(low, record);
    for (int i = 0; i < 25; ++i) core.step();  // low holds 46 tokens (3 blocks): 5 are free
    ASSERT_EQ(rec.outcomes[low_id].tokens.size(), 25u);
    const RequestId high_id = core.add_request(high, record);
    core.step();
    EXPECT_EQ(core.stats().preemptions, 1) << "the low-priority request makes room";
    EXPECT_EQ(rec.outcomes[high_id].tokens.size(), 1u) << "the high-priority prompt ran at once";
    drain(core);

    EXPECT_EQ(rec.outcomes[high_id].tokens, high_alone.tokens);
    EXPECT_EQ(rec.outcomes[low_id].tokens, low_alone.tokens);
    EXPECT_EQ(rec.outcomes[low_id].n_finish_events, 1);
    EXPECT_EQ(rec.outcomes[high_id].finish, RequestFinish::Length);
    EXPECT_EQ(finish_order, (std::vector<RequestId>{high_id, low_id}));
    EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
  }
}

TEST(EnginePriority, EqualPrioritiesWaitTheirTurn) {
  auto& s = stories();
  std::vector<TokenId> a_prompt{1}, b_prompt{1};
  for (int i = 0; i < 20; ++i) a_prompt.push_back(static_cast<TokenId>(100 + 7 * i));
  for (int i = 0; i < 89; ++i) b_prompt.push_back(static_cast<TokenId>(50 + 5 * i));
  EngineConfig cfg;
  cfg.kv_blocks = 8;
  cfg.prefix_caching = false;
  EngineCore core(s.model, nullptr, cfg);
  Recorder rec;
  const RequestId a = core.add_request(make(a_prompt, 60, 0, 0.f), std::ref(rec));
  for (int i = 0; i < 25; ++i) core.step();
  const RequestId b = core.add_request(make(b_prompt, 20, 0, 0.f), std::ref(rec));
  core.step();
  EXPECT_EQ(core.stats().preemptions, 0);
  EXPECT_TRUE(rec.outcomes[b].tokens.empty()) << "FCFS: b waits for room";
  drain(core);
  EXPECT_EQ(rec.outcomes[a].tokens.size(), 60u);
  EXPECT_EQ(rec.outcomes[b].tokens.size(), 20u);
}

}  // namespace
}  // namespace peregrine
