// StepTrace: the last steps per batch slot, as the web page's live view draws them.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/step_trace.h"
#include "engine_test_util.h"

namespace peregrine {
namespace {

TEST(StepTrace, SlotsStayWithTheirRequestAndAreReusedOnceReleased) {
  StepTrace trace;
  const TracedChunk a{10, true, 5, 0}, b{11, true, 3, 0};
  trace.record(std::vector{a, b}, 1.0);
  trace.record(std::vector{TracedChunk{11, false, 1, 3}, TracedChunk{10, false, 2, 5}}, 2.0);  // order changed
  trace.release(10);
  trace.record(std::vector{TracedChunk{12, true, 4, 0}, TracedChunk{11, false, 1, 4}}, 3.0);
  std::vector<StepSummary> steps;
  std::vector<SlotCell> cells;
  EXPECT_EQ(trace.copy_since(0, steps, cells), 3);
  ASSERT_EQ(steps.size(), 3u);
  ASSERT_EQ(cells.size(), 3u * StepTrace::kSlots);
  auto cell = [&](int step, int slot) { return cells[static_cast<size_t>(step * StepTrace::kSlots + slot)]; };
  EXPECT_EQ(cell(0, 0).request, 10);
  EXPECT_EQ(cell(0, 0).phase, SlotPhase::Prefill);
  EXPECT_EQ(cell(0, 0).tokens, 5);
  EXPECT_EQ(cell(0, 1).request, 11);
  EXPECT_EQ(cell(1, 0).request, 10);  // kept its slot though it came second
  EXPECT_EQ(cell(1, 0).phase, SlotPhase::Decode);
  EXPECT_EQ(cell(1, 1).request, 11);
  EXPECT_EQ(cell(2, 0).request, 12);  // the freed slot, taken by the newcomer
  EXPECT_EQ(cell(2, 1).request, 11);
  EXPECT_EQ(cell(2, 2).phase, SlotPhase::Idle);
  EXPECT_EQ(steps[0].prefill_tokens, 8);
  EXPECT_EQ(steps[0].decode_rows, 0);
  EXPECT_EQ(steps[1].decode_rows, 3);
  EXPECT_EQ(steps[1].ms, 2.0);
  // Step 2: request 11 reads positions [0, 4), request 10 (2 rows from 5) [0, 7).
  EXPECT_EQ(steps[1].context_tokens, 4 + 7);
  // Pairs: a row at position p attends p + 1 positions: 4 for 11; 6 + 7 for 10.
  EXPECT_EQ(steps[1].attention_pairs, 4 + 6 + 7);
  EXPECT_EQ(steps[0].attention_pairs, 15 + 6);  // 1+..+5 and 1+2+3
  EXPECT_LE(steps[0].end_s, steps[2].end_s);

  // Only what is newer than the step a reader saw.
  EXPECT_EQ(trace.copy_since(2, steps, cells), 3);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 3);
  EXPECT_EQ(trace.copy_since(3, steps, cells), 3);
  EXPECT_TRUE(steps.empty());
  EXPECT_TRUE(cells.empty());
}

TEST(StepTrace, TheRingKeepsTheLastStepsAndSequencesBeyondTheSlotsAreCounted) {
  StepTrace trace;
  std::vector<TracedChunk> many;
  for (RequestId r = 0; r < StepTrace::kSlots + 3; ++r) many.push_back({r, false, 1, 7});
  const int64_t n = StepTrace::kSteps + 44;
  for (int64_t i = 0; i < n; ++i) trace.record(many, 0.5);
  std::vector<StepSummary> steps;
  std::vector<SlotCell> cells;
  EXPECT_EQ(trace.copy_since(0, steps, cells), n);
  ASSERT_EQ(steps.size(), static_cast<size_t>(StepTrace::kSteps));
  EXPECT_EQ(steps.front().step, n - StepTrace::kSteps + 1);
  EXPECT_EQ(steps.back().step, n);
  EXPECT_EQ(steps.back().unslotted, 3);
  EXPECT_EQ(steps.back().decode_rows, StepTrace::kSlots + 3);
  EXPECT_EQ(cells.back().request, StepTrace::kSlots - 1);
}

// A real engine: every chunk it ran is in the trace, in a slot of its own that it keeps from
// its first step to its last, prefill chunks before decodes.
TEST(StepTrace, TheEngineRecordsEveryChunkInASlotItKeeps) {
  auto& s = test::stories();
  EngineConfig cfg;
  cfg.kv_blocks = 64;
  cfg.scheduler.max_seqs = 3;
  cfg.scheduler.max_batched_tokens = 24;  // long prompts go in chunks
  EngineCore core(s.model, &s.tokenizer, cfg);
  test::Recorder rec;
  std::vector<RequestId> ids;
  for (int i = 0; i < 5; ++i) {
    Request r;
    r.prompt = s.tokenizer.encode(std::string(static_cast<size_t>(10 + 25 * i), 'a') + " Once upon a time", true, false);
    r.max_tokens = 6 + 3 * i;
    r.sampling.temperature = 0;
    ids.push_back(core.add_request(r));
  }
  test::run_to_completion(core, rec);
  std::vector<StepSummary> steps;
  std::vector<SlotCell> cells;
  const int64_t last = core.trace().copy_since(0, steps, cells);
  EXPECT_EQ(last, core.stats().steps);
  ASSERT_EQ(static_cast<int64_t>(steps.size()), last);

  std::map<RequestId, std::set<size_t>> slots_of;
  std::map<RequestId, int64_t> decodes, prefill_tokens;
  std::map<RequestId, int64_t> last_prefill_step, first_decode_step;
  for (size_t st = 0; st < steps.size(); ++st) {
    int64_t rows = 0;
    for (size_t slot = 0; slot < static_cast<size_t>(StepTrace::kSlots); ++slot) {
      const SlotCell& c = cells[st * StepTrace::kSlots + slot];
      if (c.phase == SlotPhase::Idle) continue;
      EXPECT_LT(slot, 3u) << "more slots than max_seqs";
      slots_of[c.request].insert(slot);
      rows += c.tokens;
      if (c.phase == SlotPhase::Prefill) {
        prefill_tokens[c.request] += c.tokens;
        last_prefill_step[c.request] = static_cast<int64_t>(st);
      } else {
        ++decodes[c.request];
        if (!first_decode_step.contains(c.request)) first_decode_step[c.request] = static_cast<int64_t>(st);
      }
    }
    EXPECT_EQ(rows, steps[st].decode_rows + steps[st].prefill_tokens) << st;
    EXPECT_EQ(steps[st].unslotted, 0);
  }
  for (RequestId id : ids) {
    const test::Outcome& o = rec.outcomes[id];
    ASSERT_EQ(o.finish, RequestFinish::Length) << id;
    EXPECT_EQ(slots_of[id].size(), 1u) << "request " << id << " moved between slots";
    // The prompt's last token runs in its last prefill chunk (which also samples the first
    // token), so a decode step for each further token.
    EXPECT_EQ(decodes[id], static_cast<int64_t>(o.tokens.size()) - 1) << id;
    EXPECT_GT(prefill_tokens[id], 1) << id;
    EXPECT_LT(last_prefill_step[id], first_decode_step[id]) << id;
  }
}

}  // namespace
}  // namespace peregrine
