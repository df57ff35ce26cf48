// Multi-token engine steps (speculative decoding's mechanics): a decoding sequence carries draft
// tokens, the step returns logits for each of their rows, the verifier accepts or rejects them,
// and rejected K/V is rolled back. A replay proposer (it proposes what a plain run generated,
// with every few proposals deliberately wrong) makes steps with full, partial and no acceptance;
// the generated tokens must equal plain decoding's, greedy and seeded sampling alike.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine_test_util.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::ReplayProposer;
using test::run_alone;
using test::run_to_completion;
using test::stories;

Request request(std::vector<TokenId> prompt, int64_t max_tokens, float temperature, uint64_t seed) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_k = temperature > 0 ? 40 : 0;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  return r;
}

std::vector<TokenId> full_sequence(const Request& r, const Outcome& o) {
  std::vector<TokenId> all = r.prompt;
  all.insert(all.end(), o.tokens.begin(), o.tokens.end());
  return all;
}

TEST(Speculation, TokensEqualPlainDecodingForAnyKGreedyAndSampled) {
  auto& s = stories();
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> prompt = {1};
    for (int k = 0; k < 3 + 4 * i; ++k) prompt.push_back(static_cast<TokenId>(20 + 37 * (i + k) % 480));
    requests.push_back(request(prompt, 30, i % 2 ? 0.9f : 0.f, static_cast<uint64_t>(100 + i)));
  }
  requests[4].speculate = false;  // a plain sequence in the same batches
  std::vector<Outcome> plain;
  for (const Request& r : requests) plain.push_back(run_alone(s.model, &s.tokenizer, r));

  for (int64_t k : {1, 2, 4, 8}) {
    auto proposer = std::make_shared<ReplayProposer>(5);
    for (size_t i = 0; i < requests.size(); ++i) proposer->known.push_back(full_sequence(requests[i], plain[i]));
    EngineConfig cfg;
    cfg.kv_blocks = 64;
    cfg.proposer = proposer;
    cfg.spec_tokens = k;
    EngineCore core(s.model, &s.tokenizer, cfg);
    Recorder rec;
    std::vector<RequestId> ids;
    for (const Request& r : requests) ids.push_back(core.add_request(r));
    while (core.has_work()) {
      for (const auto& ev : core.step()) rec(ev);
      // Rejected drafts' K/V is rolled back: a running request's cache holds exactly its
      // committed tokens but the last, and no block past them.
      for (size_t i = 0; i < requests.size(); ++i) {
        const Outcome& o = rec.outcomes[ids[i]];
        if (o.tokens.empty() || o.n_finish_events > 0) continue;
        const int64_t len = static_cast<int64_t>(requests[i].prompt.size() + o.tokens.size()) - 1;
        EXPECT_GE(core.kv().pool().capacity(static_cast<SeqId>(ids[i])), len) << "k " << k << " request " << i;
        EXPECT_LE(core.kv().pool().capacity(static_cast<SeqId>(ids[i])), len + 16) << "k " << k << " request " << i;
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const Outcome& got = rec.outcomes[ids[i]];
      EXPECT_EQ(got.tokens, plain[i].tokens) << "k " << k << " request " << i;
      EXPECT_EQ(got.text, plain[i].text) << "k " << k << " request " << i;
      EXPECT_EQ(got.n_finish_events, 1);
    }
    const EngineStats st = core.stats();
    EXPECT_GT(st.accepted_tokens, 0) << "k " << k;
    EXPECT_GT(st.draft_tokens, st.accepted_tokens) << "k " << k << ": some proposals are wrong by design";
    if (k > 1) {
      EXPECT_LT(st.steps, 30 + 6) << "accepted drafts should save steps";
    }
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

TEST(Speculation, AStepReturnsLogitsForEveryDraftRowAsIfRunOneByOne) {
  auto& s = stories();
  const std::vector<TokenId> prompt = {1, 400, 31, 52, 9, 77};
  const std::vector<TokenId> drafts = {13, 250, 7};
  // All drafts in one step: the last prompt token and three drafts, logits for each row.
  KvCache kv = s.model.make_kv_cache(KvType::F16, 8, 4);
  ASSERT_TRUE(kv.pool().reserve(0, 16));
  Batch b;
  for (size_t i = 0; i + 1 < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, false);
  std::vector<float> logits;
  s.model.forward(b, kv, logits);
  b.clear();
  b.add(prompt.back(), static_cast<int32_t>(prompt.size() - 1), 0, true);
  for (size_t i = 0; i < drafts.size(); ++i) b.add(drafts[i], static_cast<int32_t>(prompt.size() + i), 0, true);
  std::vector<float> together;
  s.model.forward(b, kv, together);
  ASSERT_EQ(together.size(), 4 * static_cast<size_t>(s.model.config().n_vocab));
  // One at a time in a fresh cache.
  KvCache kv1 = s.model.make_kv_cache(KvType::F16, 8, 4);
  ASSERT_TRUE(kv1.pool().reserve(0, 16));
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), drafts.begin(), drafts.end());
  std::vector<float> one;
  for (size_t p = 0; p < all.size(); ++p) {
    b.clear();
    b.add(all[p], static_cast<int32_t>(p), 0, true);
    s.model.forward(b, kv1, one);
    if (p + 1 < prompt.size()) continue;
    const size_t row = p + 1 - prompt.size();
    EXPECT_EQ(0, std::memcmp(one.data(), together.data() + row * one.size(), sizeof(float) * one.size())) << row;
  }
}

TEST(Speculation, StopStringInsideAnAcceptedRunEndsTheRequestThere) {
  auto& s = stories();
  Request r = request(s.tokenizer.encode("Once upon a time", true, false), 60, 0.f, 1);
  const Outcome full = run_alone(s.model, &s.tokenizer, r);
  ASSERT_GT(full.text.size(), 40u);
  r.stop = {full.text.substr(25, 6)};
  const Outcome plain = run_alone(s.model, &s.tokenizer, r);
  ASSERT_EQ(plain.finish, RequestFinish::Stop);
  auto proposer = std::make_shared<ReplayProposer>(0);  // always right: long accepted runs
  proposer->known.push_back(full_sequence(r, full));
  EngineConfig cfg;
  cfg.kv_blocks = 40;
  cfg.prefix_caching = false;
  cfg.proposer = proposer;
  cfg.spec_tokens = 8;
  EngineCore core(s.model, &s.tokenizer, cfg);
  Recorder rec;
  const RequestId id = core.add_request(r);
  run_to_completion(core, rec);
  EXPECT_EQ(rec.outcomes[id].text, plain.text);
  EXPECT_EQ(rec.outcomes[id].tokens, plain.tokens);
  EXPECT_EQ(rec.outcomes[id].finish, RequestFinish::Stop);
  EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
}

// Arrivals, cancellations and a KV cache tight enough to preempt, with speculation on: every
// request ends once with the tokens it gets alone without speculation; every block is free.
TEST(Speculation, StressUnderTightMemoryKeepsEveryRequestsTokens) {
  auto& s = stories();
  std::mt19937 rng(3);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Request> requests;
  for (int i = 0; i < 60; ++i) {
    std::vector<TokenId> prompt = {1};
    for (int k = 0, n = uni(0, 30); k < n; ++k) prompt.push_back(uni(3, 511));
    Request r = request(prompt, uni(1, 24), uni(0, 1) ? 0.f : 0.8f, static_cast<uint64_t>(i));
    r.ignore_eos = false;
    r.speculate = uni(0, 4) != 0;
    requests.push_back(std::move(r));
  }
  auto proposer = std::make_shared<ReplayProposer>(4);
  std::vector<Outcome> plain;
  for (const Request& r : requests) {
    plain.push_back(run_alone(s.model, nullptr, r, 12));
    proposer->known.push_back(full_sequence(r, plain.back()));
  }
  EngineConfig cfg;
  cfg.kv_blocks = 12;
  cfg.scheduler.max_batched_tokens = 40;
  cfg.scheduler.max_seqs = 6;
  cfg.proposer = proposer;
  cfg.spec_tokens = 6;
  EngineCore core(s.model, nullptr, cfg);
  Recorder rec;
  const auto [ids, cancelled] = test::run_with_arrivals_and_cancels(core, rec, requests, uni, 3, 30, 1000000);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome& got = rec.outcomes[ids[i]];
    ASSERT_EQ(got.n_finish_events, 1) << i;
    if (cancelled.count(ids[i])) {
      ASSERT_LE(got.tokens.size(), plain[i].tokens.size());
      EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), plain[i].tokens.begin())) << i;
    } else {
      EXPECT_EQ(got.tokens, plain[i].tokens) << i;
    }
  }
  const EngineStats st = core.stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(st.accepted_tokens, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  core.block_manager().clear_prefix_cache();
  EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
}

// A proposer that misbehaves (too many tokens, ids outside the vocabulary, no distributions)
// costs speed, never correctness.
class BrokenProposer : public Proposer {
 public:
  std::string_view name() const override { return "broken"; }
  void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) override {
    int which = 0;
    for (Sequence* s : seqs) {
      switch (which++ % 3) {
        case 0: s->draft.assign(static_cast<size_t>(max_tokens[0] + 3), 5); break;  // too many, no q
        case 1: s->draft = {100000}; s->draft_q = {TokenDistribution::one_hot(100000)}; break;
        default: s->draft = {5, 6}; s->draft_q = {TokenDistribution::one_hot(5)}; break;
      }
    }
  }
};

TEST(Speculation, AMisbehavingProposerIsIgnored) {
  auto& s = stories();
  EngineConfig cfg;
  cfg.kv_blocks = 64;
  cfg.proposer = std::make_shared<BrokenProposer>();
  EngineCore core(s.model, &s.tokenizer, cfg);
  Recorder rec;
  std::vector<Request> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(request({1, static_cast<TokenId>(300 + i), 40}, 12, 0.f, 0));
  std::vector<RequestId> ids;
  for (const Request& r : requests) ids.push_back(core.add_request(r));
  run_to_completion(core, rec);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(rec.outcomes[ids[i]].tokens, run_alone(s.model, &s.tokenizer, requests[i]).tokens);
  }
  EXPECT_EQ(core.stats().draft_tokens, 0);
}

}  // namespace
}  // namespace peregrine
