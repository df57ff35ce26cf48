#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "engine_test_util.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::run_alone;
using test::run_to_completion;
using test::stories;

Request greedy_request(std::vector<TokenId> prompt, int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

std::vector<TokenId> encode(const std::string& text) {
  return stories().tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
}

// The plainest greedy loop on the model itself: the prompt in one forward call, then one token at
// a time, argmax (ties to the lowest id), stopping after an end-of-generation token.
std::vector<TokenId> plain_greedy(Model& model, const Tokenizer& tok, std::vector<TokenId> tokens, int64_t n) {
  KvCache kv = model.make_kv_cache(KvType::F16, 64, 16);
  EXPECT_TRUE(kv.pool().reserve(0, static_cast<int64_t>(tokens.size()) + n));
  std::vector<TokenId> out;
  std::vector<float> logits;
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, i + 1 == tokens.size());
  for (int64_t step = 0; step < n; ++step) {
    model.forward(b, kv, logits);
    const TokenId next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (tok.is_end_of_generation(next)) break;
    b.clear();
    b.add(next, static_cast<int32_t>(tokens.size()), 0, true);
    tokens.push_back(next);
  }
  return out;
}

TEST(EngineCore, OneRequestMatchesAPlainGreedyLoop) {
  auto& s = stories();
  const auto prompt = encode("Once upon a time, there was a little");
  const std::vector<TokenId> ref = plain_greedy(s.model, s.tokenizer, prompt, 40);

  const Outcome got = run_alone(s.model, &s.tokenizer, greedy_request(prompt, 40));
  EXPECT_EQ(got.tokens, ref);
  std::string text;
  StreamDecoder d(s.tokenizer, false, false);
  for (TokenId t : ref) {
    if (!s.tokenizer.is_end_of_generation(t)) text += d.push(t);
  }
  EXPECT_EQ(got.text, text + d.flush());
  EXPECT_EQ(got.n_finish_events, 1);
  EXPECT_EQ(got.finish, s.tokenizer.is_end_of_generation(ref.back()) ? RequestFinish::Stop : RequestFinish::Length);
}

TEST(EngineCore, StopStringSpanningTokensEndsTheRequestAndIsNotDelivered) {
  auto& s = stories();
  const auto prompt = encode("Once upon a time");
  Request r = greedy_request(prompt, 80);
  r.ignore_eos = true;
  const Outcome full = run_alone(s.model, &s.tokenizer, r);
  ASSERT_GT(full.text.size(), 30u);
  // A stop string that starts inside one token's text and ends in a later one.
  std::vector<size_t> ends;  // byte offset where each token's text ends
  {
    StreamDecoder d(s.tokenizer, false, false);
    size_t at = 0;
    for (TokenId t : full.tokens) ends.push_back(at += d.push(t).size());
  }
  ASSERT_GT(ends.size(), 8u);
  const size_t start = ends[4] - 1;
  const std::string stop = full.text.substr(start, ends[6] + 1 - start);
  ASSERT_EQ(full.text.find(stop), start) << "pick a stop string that first occurs here";
  r.stop = {"never appears", stop};
  const Outcome cut = run_alone(s.model, &s.tokenizer, r);
  EXPECT_EQ(cut.finish, RequestFinish::Stop);
  EXPECT_EQ(cut.text, full.text.substr(0, start));
  EXPECT_EQ(cut.tokens.size(), 8u);  // the token completing the stop string is the last
}

TEST(EngineCore, StopTokenIdsMaxTokensAndContextLength) {
  auto& s = stories();
  const auto prompt = encode("The cat");
  const Outcome full = run_alone(s.model, &s.tokenizer, [&] { auto r = greedy_request(prompt, 12); r.ignore_eos = true; return r; }());
  ASSERT_EQ(full.tokens.size(), 12u);
  EXPECT_EQ(full.finish, RequestFinish::Length);

  Request stop_at = greedy_request(prompt, 12);
  stop_at.ignore_eos = true;
  stop_at.stop_token_ids = {full.tokens[5]};
  const Outcome stopped = run_alone(s.model, &s.tokenizer, stop_at);
  const auto first = std::find(full.tokens.begin(), full.tokens.end(), full.tokens[5]);
  EXPECT_EQ(stopped.finish, RequestFinish::Stop);
  EXPECT_EQ(stopped.tokens, std::vector<TokenId>(full.tokens.begin(), first + 1));

  // Context length 512: a 500-token prompt can generate 12 tokens.
  std::vector<TokenId> long_prompt(500, 300);
  long_prompt[0] = 1;
  Request r = greedy_request(long_prompt, 100);
  r.ignore_eos = true;
  const Outcome ctx = run_alone(s.model, nullptr, r, 40);
  EXPECT_EQ(ctx.finish, RequestFinish::Length);
  EXPECT_EQ(ctx.tokens.size(), 12u);
}

TEST(EngineCore, InvalidRequestsEndWithAnError) {
  auto& s = stories();
  EngineConfig cfg;
  cfg.kv_blocks = 8;
  EngineCore core(s.model, &s.tokenizer, cfg);
  Recorder rec;
  const RequestId empty = core.add_request(Request{});
  const RequestId bad_id = core.add_request(greedy_request({1, 9999}, 4));
  const RequestId too_big = core.add_request(greedy_request({1, 2, 3}, 400));  // > 8 blocks
  Request bad_sampling = greedy_request({1, 5}, 4);
  bad_sampling.sampling.top_p = 0;
  const RequestId bad_s = core.add_request(bad_sampling);
  const RequestId ok = core.add_request(greedy_request({1, 5}, 4));
  run_to_completion(core, rec);
  for (RequestId id : {empty, bad_id, too_big, bad_s}) {
    EXPECT_EQ(rec.outcomes[id].finish, RequestFinish::Error) << id;
    EXPECT_FALSE(rec.outcomes[id].error.empty());
    EXPECT_EQ(rec.outcomes[id].n_finish_events, 1);
  }
  EXPECT_NE(rec.outcomes[too_big].error.find("KV cache"), std::string::npos);
  EXPECT_EQ(rec.outcomes[ok].finish, RequestFinish::Length);
  EXPECT_THROW(core.add_request(-5, greedy_request({1}, 1), {}), UsageError);
}

TEST(EngineCore, CancelEndsARequestOnceAndFreesItsBlocks) {
  auto& s = stories();
  EngineConfig cfg;
  cfg.kv_blocks = 16;
  cfg.prefix_caching = false;
  EngineCore core(s.model, nullptr, cfg);
  Recorder rec;
  const RequestId a = core.add_request(greedy_request({1, 50, 60}, 100));
  const RequestId b = core.add_request(greedy_request({1, 70}, 5));
  for (int i = 0; i < 3; ++i) for (const auto& ev : core.step()) rec(ev);
  EXPECT_TRUE(core.cancel(a));
  EXPECT_FALSE(core.cancel(a));
  run_to_completion(core, rec);
  EXPECT_EQ(rec.outcomes[a].finish, RequestFinish::Cancelled);
  EXPECT_EQ(rec.outcomes[a].n_finish_events, 1);
  EXPECT_EQ(rec.outcomes[a].tokens.size(), 3u);
  EXPECT_EQ(rec.outcomes[b].finish, RequestFinish::Length);
  EXPECT_FALSE(core.cancel(b));
  EXPECT_EQ(core.kv().pool().n_free_blocks(), 16);
}

TEST(EngineCore, PrefixCacheHitsGiveTheSameTokensAsMisses) {
  auto& s = stories();
  // 48 tokens: 3 full blocks, so the repeat is a fully cached prompt (copy-on-write path), and a
  // longer prompt sharing them.
  std::vector<TokenId> prompt = encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and her dog.");
  prompt.resize(48, 300);
  std::vector<TokenId> longer = prompt;
  for (int i = 0; i < 9; ++i) longer.push_back(static_cast<TokenId>(260 + i));
  for (float temperature : {0.f, 0.9f}) {
    auto make = [&](const std::vector<TokenId>& p) {
      Request r = greedy_request(p, 20);
      r.sampling.temperature = temperature;
      r.sampling.seed = 42;
      r.ignore_eos = true;
      return r;
    };
    const Outcome ref_a = run_alone(s.model, &s.tokenizer, make(prompt));
    const Outcome ref_b = run_alone(s.model, &s.tokenizer, make(longer));

    EngineConfig cfg;
    cfg.kv_blocks = 40;
    EngineCore core(s.model, &s.tokenizer, cfg);
    Recorder rec;
    const RequestId first = core.add_request(make(prompt));
    run_to_completion(core, rec);
    const RequestId again = core.add_request(make(prompt));
    const RequestId other = core.add_request(make(longer));
    run_to_completion(core, rec);
    EXPECT_EQ(rec.outcomes[first].tokens, ref_a.tokens);
    EXPECT_EQ(rec.outcomes[again].tokens, ref_a.tokens);
    EXPECT_EQ(rec.outcomes[again].text, ref_a.text);
    EXPECT_EQ(rec.outcomes[other].tokens, ref_b.tokens);
    const EngineStats st = core.stats();
    EXPECT_GE(st.prefix_hit_tokens, 48 + 48);  // 3 blocks for each of the two later requests
    EXPECT_GT(st.prefix_hit_rate, 0.5);
    EXPECT_EQ(st.kv_blocks_used, 0);
    core.block_manager().clear_prefix_cache();
    EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
  }
}

// Many small requests with random lengths, arrivals, priorities and cancellations under a tight
// KV cache (preemption happens): each ends exactly once, its tokens equal those of the request
// run alone (greedy and seeded sampling), and every block is free at the end.
void stress(SchedulePolicy policy, int n_requests, uint32_t seed) {
  auto& s = stories();
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // Shared prefixes make prefix hits (and their eviction) part of the mix.
  std::vector<std::vector<TokenId>> prefixes(3);
  for (auto& p : prefixes) {
    p.push_back(1);
    for (int i = 0, n = uni(10, 40); i < n; ++i) p.push_back(uni(3, 511));
  }
  std::vector<Request> requests;
  for (int i = 0; i < n_requests; ++i) {
    Request r;
    if (uni(0, 1)) r.prompt = prefixes[static_cast<size_t>(uni(0, 2))];
    else r.prompt = {1};
    for (int k = 0, n = uni(0, 30); k < n; ++k) r.prompt.push_back(uni(3, 511));
    r.max_tokens = uni(1, 24);
    r.sampling.temperature = uni(0, 1) ? 0.f : 0.8f;
    r.sampling.top_k = uni(0, 1) ? 0 : 40;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.priority = uni(0, 5) == 0 ? 1 : 0;
    if (uni(0, 3) == 0) r.stop_token_ids = {uni(3, 511)};
    requests.push_back(std::move(r));
  }
  EngineConfig cfg;
  cfg.kv_blocks = 12;  // 192 token slots: a few requests at a time
  cfg.scheduler.max_batched_tokens = 48;
  cfg.scheduler.max_seqs = 6;
  cfg.scheduler.policy = policy;
  EngineCore core(s.model, nullptr, cfg);
  Recorder rec;
  const auto [ids, cancelled] = run_with_arrivals_and_cancels(core, rec, requests, uni, 3, 30, 1000000);
  ASSERT_EQ(ids.size(), requests.size());
  int n_checked = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome& got = rec.outcomes[ids[i]];
    ASSERT_EQ(got.n_finish_events, 1) << "request " << i;
    const Outcome ref = run_alone(s.model, nullptr, requests[i], 12);
    if (cancelled.count(ids[i])) {
      EXPECT_TRUE(got.finish == RequestFinish::Cancelled || got.finish == ref.finish);
      ASSERT_LE(got.tokens.size(), ref.tokens.size());
      EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), ref.tokens.begin())) << "request " << i;
    } else {
      EXPECT_EQ(got.finish, ref.finish) << "request " << i;
      EXPECT_EQ(got.tokens, ref.tokens) << "request " << i;
      ++n_checked;
    }
  }
  EXPECT_GT(n_checked, n_requests / 2);
  const EngineStats st = core.stats();
  EXPECT_GT(st.preemptions, 0) << "the cache should be tight enough to preempt";
  EXPECT_GT(st.prefix_hit_tokens, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.running + st.waiting, 0);
  core.block_manager().clear_prefix_cache();
  EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
}

TEST(EngineStress, ContinuousBatchingUnderTightMemory) { stress(SchedulePolicy::Continuous, 300, 1); }
TEST(EngineStress, StaticBatchingUnderTightMemory) { stress(SchedulePolicy::Static, 100, 2); }

}  // namespace
}  // namespace peregrine
