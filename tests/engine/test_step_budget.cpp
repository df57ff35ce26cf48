// Latency-aware chunked prefill: the step-time model recovers a linear cost, and an engine with a
// step-time budget cuts a long prompt into small chunks beside running decodes, never changing a
// token.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "engine/step_budget.h"
#include "engine/step_cost.h"
#include "engine_test_util.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::run_alone;
using test::run_to_completion;
using test::stories;

// A greedy request that keeps decoding for max_tokens (ignores EOS).
Request decoding_request(int64_t max_tokens) {
  Request r;
  r.prompt = {1, 300, 301};
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

// A greedy request with a 301-token prompt.
Request long_prompt_request(int64_t max_tokens) {
  Request r = decoding_request(max_tokens);
  r.prompt = {1};
  for (int i = 0; i < 300; ++i) r.prompt.push_back(3 + (i * 37) % 500);
  return r;
}

// The engine these tests run: room for the requests, the step budget given (0 = off), prompt
// chunks of at least 16 tokens.
EngineConfig budget_config(double max_step_ms) {
  EngineConfig cfg;
  cfg.kv_blocks = 64;
  cfg.max_step_ms = max_step_ms;
  cfg.min_prefill_chunk = 16;
  return cfg;
}

// Adds `r` and steps until its first token: the steps that took.
int64_t steps_to_first_token(EngineCore& core, Recorder& rec, const Request& r, RequestId& id) {
  id = core.add_request(r);
  int64_t steps = 0;
  while (rec.outcomes[id].tokens.empty()) {
    for (const auto& ev : core.step()) rec(ev);
    ++steps;
  }
  return steps;
}

// A step of `d` single-row decodes and (when p > 0) one p-token prompt chunk from position 0.
StepShape shape(int64_t d, int64_t p) {
  StepShape s;
  s.decode_rows = d;
  if (p > 0) s.add(true, 0, p);
  return s;
}

TEST(StepCostModel, RecoversALinearStepCostFromNoisySteps) {
  StepCostModel m(0.98);
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> decode(0, 16), prefill(0, 400);
  std::normal_distribution<double> noise(0.0, 0.05);
  EXPECT_FALSE(m.ready());
  for (int i = 0; i < 300; ++i) {
    const int d = decode(rng), p = i % 3 == 0 ? 0 : prefill(rng);
    // Chunks that all start at 0 tie the attention term to the token count; decodes at no
    // context leave it alone.
    StepShape s;
    s.decode_rows = d;
    s.prefill_tokens = p;
    m.observe(s, 2.0 + 0.5 * d + 0.03 * p + noise(rng));
  }
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.fixed_ms(), 2.0, 0.1);
  EXPECT_NEAR(m.ms_per_decode_row(), 0.5, 0.02);
  EXPECT_NEAR(m.ms_per_prefill_token(), 0.03, 0.002);
  // 20 ms with 8 decodes: (20 - 2 - 4) / 0.03 ~ 466 prefill tokens.
  EXPECT_NEAR(static_cast<double>(m.prefill_tokens_within(shape(8, 0), 0, 20.0)), 466.0, 20.0);
  EXPECT_EQ(m.prefill_tokens_within(shape(8, 0), 0, 5.0), 0);  // the decodes alone use the budget
  // Past the ridge once the rows cost more than the fixed 2 ms: 4 decodes (2 ms) are not, 5 are;
  // 100 prefill tokens (3 ms) are.
  EXPECT_FALSE(m.compute_bound(shape(3, 0)));
  EXPECT_TRUE(m.compute_bound(shape(5, 0)));
  EXPECT_TRUE(m.compute_bound({0, 100, 0}));
  EXPECT_FALSE(m.compute_bound({0, 30, 0}));
}

// Steps whose attention grows with the context (decodes at long contexts, prompt chunks late in
// their prompts): the fit separates the per-token cost from the per-pair one, and a chunk late in
// a prompt gets fewer tokens than one at its start, each filling the budget without overshooting.
TEST(StepCostModel, RecoversTheAttentionTermAndSizesLateChunksSmaller) {
  StepCostModel m(0.98);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> decode(1, 8), context(16, 900), chunk(16, 300);
  std::normal_distribution<double> noise(0.0, 0.05);
  // 3 ms + 1 ms per decode + 0.05 ms per prompt token + 0.1 ms per 1000 attention pairs.
  auto truth = [](const StepShape& s) {
    return 3.0 + 1.0 * s.decode_rows + 0.05 * s.prefill_tokens + 0.1e-3 * s.attention_pairs;
  };
  for (int i = 0; i < 400; ++i) {
    StepShape s;
    for (int k = decode(rng); k > 0; --k) s.add(false, context(rng), 1);
    if (i % 3 != 0) s.add(true, context(rng) - 16, chunk(rng));
    m.observe(s, truth(s) + noise(rng));
  }
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.fixed_ms(), 3.0, 0.15);
  EXPECT_NEAR(m.ms_per_decode_row(), 1.0, 0.05);
  EXPECT_NEAR(m.ms_per_prefill_token(), 0.05, 0.005);
  EXPECT_NEAR(m.ms_per_kilo_pair(), 0.1, 0.01);

  StepShape decodes;
  for (int k = 0; k < 4; ++k) decodes.add(false, 600, 1);
  const double budget = 30;
  const int64_t early = m.prefill_tokens_within(decodes, 0, budget);
  const int64_t late = m.prefill_tokens_within(decodes, 800, budget);
  EXPECT_LT(late, early * 3 / 4);
  for (const auto& [start, n] : {std::pair<int64_t, int64_t>{0, early}, {800, late}}) {
    StepShape step = decodes;
    step.add(true, start, n);
    EXPECT_LE(truth(step), budget + 0.3) << "chunk at " << start;
    step.add(true, start + n, 8);
    EXPECT_GT(truth(step), budget - 0.3) << "chunk at " << start << " leaves the budget unused";
  }
}

// Seconds of a single stream decoding (the steps never vary the decode rows, nor carry prompt
// tokens) must not cost the fit what it knew: the next step with 8 decodes and the next prompt
// chunk are still predicted near their cost.
TEST(StepCostModel, KeepsWhatItKnewThroughALongStretchOfOneDecode) {
  StepCostModel m(0.95);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> decode(1, 8), prefill(16, 300);
  std::normal_distribution<double> noise(0.0, 0.3);
  auto truth = [](int64_t d, int64_t p) { return 5.0 + 1.0 * d + 0.05 * p; };
  for (int i = 0; i < 100; ++i) {
    const int d = decode(rng), p = i % 2 == 0 ? 0 : prefill(rng);
    m.observe(shape(d, p), truth(d, p) + noise(rng));
  }
  for (int i = 0; i < 600; ++i) m.observe(shape(1, 0), truth(1, 0) + noise(rng));
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.predict_ms(shape(1, 0)), truth(1, 0), 0.3);
  EXPECT_NEAR(m.predict_ms(shape(8, 0)), truth(8, 0), 1.5);
  EXPECT_NEAR(m.predict_ms(shape(1, 200)), truth(1, 200), 1.5);
  EXPECT_NEAR(static_cast<double>(m.prefill_tokens_within(shape(1, 0), 0, 2.5 * truth(1, 0))), 1.5 * 6.0 / 0.05, 30.0);
}

// Steps that barely vary the terms apart, as a loaded machine served them (from a bench-serve
// --step-log): one stream decoding, two whole prompts with none, then minimal chunks beside the
// stream while the machine slowed down. Unconstrained, the fit explained them with a fixed cost of
// -250 ms and 260 ms a decode row, and budgeted 550 ms for the next step with two decodes; every
// cost stays >= 0, and two decodes cost at most about twice one.
TEST(StepCostModel, CostsStayNonNegativeWhereTheStepsLeaveThemUndetermined) {
  StepCostModel m(0.95);
  for (int i = 0; i < 100; ++i) m.observe(shape(1, 0), 10.5);
  m.observe(shape(0, 512), 546);
  m.observe({0, 512, attention_pairs(512, 512)}, 498);
  for (int i = 0; i < 30; ++i) m.observe({1, 16, attention_pairs(500 + 16 * i, 16) + 1000}, 30.0 + i);
  ASSERT_TRUE(m.ready());
  for (double w : {m.fixed_ms(), m.ms_per_decode_row(), m.ms_per_prefill_token(), m.ms_per_kilo_pair()}) {
    EXPECT_GE(w, 0);
  }
  EXPECT_LT(m.predict_ms(shape(2, 0)), 2 * m.predict_ms(shape(1, 0)) + 1);
}

// A noisy machine can drag the fitted prefill cost to zero or below for a while; the engine must
// not fall back to whole 512-token chunks (a stall for every stream) when it does.
TEST(StepCostModel, StaysReadyWhenNoiseDragsThePrefillCostDown) {
  StepCostModel m(0.9);
  for (int i = 0; i < 10; ++i) m.observe(shape(4, i % 2 == 0 ? 0 : 100), i % 2 == 0 ? 3.0 : 6.0);
  ASSERT_TRUE(m.ready());
  ASSERT_GT(m.ms_per_prefill_token(), 0);
  // Prefill steps that took less time than the decodes alone: the fit's prefill cost turns negative.
  for (int i = 0; i < 40; ++i) m.observe(shape(4, i % 2 == 0 ? 0 : 100), i % 2 == 0 ? 6.0 : 1.0);
  ASSERT_LE(m.ms_per_prefill_token(), 0);
  EXPECT_TRUE(m.ready());
  EXPECT_EQ(m.prefill_tokens_within(shape(4, 0), 0, 1000.0), 0) << "no trustworthy cost: the minimal chunk";
}

// The derived budget (the CLI's default): kAutoStepFactor times the decodes' own predicted step
// time, which the prefill tokens then fill; a fixed budget and fixed chunks as before.
TEST(StepBudget, TheDerivedBudgetIsAMultipleOfTheDecodeStepsMeasuredTime) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> running;
  for (RequestId id = 1; id <= 8; ++id) {
    seqs.push_back(std::make_unique<Sequence>(id, decoding_request(4), id));
    seqs.back()->phase = SeqPhase::Decode;
    seqs.back()->n_computed = static_cast<int64_t>(seqs.back()->tokens.size()) - 1;
    running.push_back(seqs.back().get());
  }
  StepBudget derived(512, 64, StepBudgetConfig{kAutoStepBudget, 16, 1});
  StepBudget fixed_ms(512, 64, StepBudgetConfig{24.0, 16, 1});
  StepBudget fixed_chunks(512, 64, StepBudgetConfig{0.0, 16, 1});
  // Before any step: no budget yet, and short warm-up chunks beside the decodes.
  EXPECT_EQ(derived.budget_ms(shape(8, 0)), 0.0);
  EXPECT_EQ(derived.tokens(running), 8 + 4 * 16);
  // Steps costing exactly 4 ms + 0.5 ms per decode row + 0.1 ms per prompt token.
  for (int i = 0; i < 40; ++i) {
    const int64_t d = i % 9, p = i % 2 == 0 ? 0 : 10 * i;
    for (StepBudget* b : {&derived, &fixed_ms, &fixed_chunks}) b->observe({d, p, 0}, 4.0 + 0.5 * d + 0.1 * p);
  }
  ASSERT_TRUE(derived.cost().ready());
  // 8 decodes: 8 ms alone, so 20 ms in all (factor 2.5) and (20 - 8) / 0.1 = 120 prompt tokens
  // beside them.
  static_assert(kAutoStepFactor == 2.5, "the figures below assume the factor");
  EXPECT_NEAR(derived.budget_ms(shape(8, 0)), kAutoStepFactor * 8.0, 0.01);
  EXPECT_NEAR(static_cast<double>(derived.tokens(running)), 8 + 120, 1.0);
  // One decode: 4.5 ms alone, 11.25 ms in all, 67 prompt tokens; it scales with the decodes.
  EXPECT_NEAR(static_cast<double>(derived.tokens(std::span<Sequence* const>(running).first(1))), 1 + 67, 1.0);
  EXPECT_EQ(fixed_ms.budget_ms(shape(8, 0)), 24.0);
  EXPECT_NEAR(static_cast<double>(fixed_ms.tokens(running)), 8 + 160, 1.0);  // (24 - 8) / 0.1
  EXPECT_EQ(fixed_chunks.budget_ms(shape(8, 0)), 0.0);
  EXPECT_EQ(fixed_chunks.tokens(running), 512);
  // Nothing decoding: no stream waits, whole chunks under every setting.
  EXPECT_EQ(derived.tokens({}), 512);
}

TEST(StepBudget, ALongPromptIsChunkedBesideDecodesWithTheSameTokens) {
  auto& s = stories();
  // Still decoding when the long prompt arrives, however long warm-up takes.
  const Request decoding = decoding_request(400);
  const Request long_prompt = long_prompt_request(8);

  for (double max_step_ms : {0.0, 1e-6}) {  // off, then a budget no step can meet: minimal chunks
    EngineCore core(s.model, nullptr, budget_config(max_step_ms));
    Recorder rec;
    const RequestId a = core.add_request(decoding);
    // Decode a while, with short prompts arriving, so the cost model sees both kinds of steps;
    // on a loaded machine noisy timings can keep the fit unready longer, so warm up until it is.
    for (int i = 0; i < 12 || (max_step_ms > 0 && core.stats().step_cost_ms_per_prefill_token <= 0 && i < 600); ++i) {
      for (const auto& ev : core.step()) rec(ev);
      if (i % 3 == 2) {
        Request r;
        r.prompt = {1, 5, 6, 7, 8, 9, static_cast<TokenId>(10 + i % 400)};
        r.sampling = decoding.sampling;
        r.max_tokens = 2;
        core.add_request(r);
      }
    }
    ASSERT_TRUE(rec.outcomes[a].tokens.size() < 400) << "the decoding request ended during warm-up";
    const int64_t steps_before = core.stats().steps;
    RequestId b = 0;
    const int64_t steps = steps_to_first_token(core, rec, long_prompt, b);
    run_to_completion(core, rec);
    if (max_step_ms == 0) {
      EXPECT_LE(steps, 1) << "fixed 512-token chunks take the prompt at once";
    } else {
      EXPECT_GE(steps, 300 / 16) << "the budget cuts the prompt into minimal chunks";
    }
    EXPECT_GT(core.stats().steps, steps_before);
    EXPECT_EQ(rec.outcomes[a].tokens, run_alone(s.model, nullptr, decoding).tokens);
    EXPECT_EQ(rec.outcomes[b].tokens, run_alone(s.model, nullptr, long_prompt).tokens);
  }
}

// With nothing decoding no stream waits on the step: a prompt takes whole chunks even under a
// budget no step can meet, so an idle server's first token is not delayed by the budget.
TEST(StepBudget, APromptAloneTakesWholeChunksUnderABudget) {
  auto& s = stories();
  EngineCore core(s.model, nullptr, budget_config(1e-6));
  Recorder rec;
  const Request decoding = decoding_request(24);
  // Warm the cost model up with decodes and short prompts, then let everything finish.
  for (int i = 0; i < 600 && core.stats().step_cost_ms_per_prefill_token <= 0; ++i) {
    if (i % 20 == 0) core.add_request(decoding);
    for (const auto& ev : core.step()) rec(ev);
  }
  ASSERT_GT(core.stats().step_cost_ms_per_prefill_token, 0) << "the cost model never became ready";
  run_to_completion(core, rec);

  const Request long_prompt = long_prompt_request(4);
  RequestId b = 0;
  EXPECT_EQ(steps_to_first_token(core, rec, long_prompt, b), 1)
      << "no stream decodes, so the budget must not cut the prompt";
  run_to_completion(core, rec);
  EXPECT_EQ(rec.outcomes[b].tokens, run_alone(s.model, nullptr, long_prompt).tokens);
}

// Before the cost model has seen enough steps, a prompt arriving beside a decoding stream gets
// short chunks (even under a budget no step would reach), so a burst at start cannot stall the
// first streams behind whole 512-token chunks.
TEST(StepBudget, ChunksStayShortWhileTheCostModelWarmsUp) {
  auto& s = stories();
  const Request decoding = decoding_request(40);
  const Request long_prompt = long_prompt_request(4);
  for (double max_step_ms : {0.0, 1e6}) {
    EngineCore core(s.model, nullptr, budget_config(max_step_ms));
    Recorder rec;
    core.add_request(decoding);
    for (const auto& ev : core.step()) rec(ev);  // its prompt: now it decodes
    RequestId b = 0;
    const int64_t steps = steps_to_first_token(core, rec, long_prompt, b);
    run_to_completion(core, rec);
    if (max_step_ms == 0) {
      EXPECT_EQ(steps, 1);
    } else {
      EXPECT_GE(steps, 2) << "warm-up chunks are short beside a decoding stream";
    }
    EXPECT_EQ(rec.outcomes[b].tokens, run_alone(s.model, nullptr, long_prompt).tokens);
  }
}

}  // namespace
}  // namespace peregrine
