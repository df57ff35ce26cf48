// Scripted scheduler scenarios: no model, the test plays the engine's part (advance n_computed,
// append a token when a sequence's tokens are all computed).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "model/config.h"
#include "engine/scheduler.h"
#include "util/error.h"

namespace peregrine {
namespace {

struct Harness {
  Harness(int64_t n_blocks, SchedulerConfig cfg, bool prefix = false)
      : pool(n_blocks, 4), bm(pool, prefix), sched(cfg, bm) {}

  Sequence* add(int prompt_len, int priority = 0, int first_token = 10) {
    Request r;
    r.prompt.resize(static_cast<size_t>(prompt_len));
    std::iota(r.prompt.begin(), r.prompt.end(), first_token);
    r.priority = priority;
    r.sampling.temperature = 0;
    seqs.push_back(std::make_unique<Sequence>(static_cast<RequestId>(seqs.size() + 1), std::move(r), seqs.size()));
    sched.add(seqs.back().get());
    return seqs.back().get();
  }
  // Plays the model: K/V computed, one token sampled for each sequence whose tokens are all in.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    for (const auto& c : out.chunks) {
      c.seq->n_computed += c.n_tokens;
      bm.commit(c.seq->seq_id(), c.seq->tokens, c.seq->n_computed);
      if (c.seq->n_computed == static_cast<int64_t>(c.seq->tokens.size())) {
        c.seq->tokens.push_back(7);
        c.seq->phase = SeqPhase::Decode;  // its logits landed
      }
    }
    return out;
  }
  int64_t scheduled(const SchedulerOutput& out, const Sequence* s) const {
    for (const auto& c : out.chunks) {
      if (c.seq == s) return c.n_tokens;
    }
    return 0;
  }

  BlockPool pool;
  BlockManager bm;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

TEST(Scheduler, RejectsNonPositiveLimits) {
  BlockPool pool(4, 4);
  BlockManager bm(pool, false);
  EXPECT_THROW(Scheduler({0, 4}, bm), UsageError);
  EXPECT_THROW(Scheduler({16, 0}, bm), UsageError);
}

TEST(Scheduler, TokenBudgetChunksPromptsAndAdmitsInArrivalOrder) {
  Harness h(64, {16, 8});
  Sequence* a = h.add(10);
  Sequence* b = h.add(10);
  Sequence* c = h.add(10);
  auto out = h.step();
  EXPECT_EQ(out.n_tokens, 16);
  EXPECT_EQ(h.scheduled(out, a), 10);
  EXPECT_EQ(h.scheduled(out, b), 6);  // chunked: the rest of the budget
  EXPECT_EQ(h.scheduled(out, c), 0);
  EXPECT_EQ(c->phase, SeqPhase::Waiting);
  // Step 2: a decodes (1), b finishes its prompt (4), c gets the remaining 11 -> 10.
  out = h.step();
  EXPECT_EQ(h.scheduled(out, a), 1);
  EXPECT_EQ(h.scheduled(out, b), 4);
  EXPECT_EQ(h.scheduled(out, c), 10);
  EXPECT_EQ(out.n_tokens, 15);
}

TEST(Scheduler, DecodesRunBeforeALongPromptsChunks) {
  Harness h(128, {8, 8});
  Sequence* early = h.add(8);
  h.step();  // early's prompt
  Sequence* book = h.add(100);
  for (int i = 0; i < 5; ++i) {
    auto out = h.step();
    EXPECT_EQ(h.scheduled(out, early), 1) << "step " << i;  // decode never stalls
    EXPECT_EQ(h.scheduled(out, book), 7) << "step " << i;   // the book rides along in chunks
  }
}

TEST(Scheduler, SequenceCapLimitsTheBatch) {
  Harness h(64, {64, 2});
  h.add(3);
  h.add(3);
  Sequence* third = h.add(3);
  auto out = h.step();
  EXPECT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(third->phase, SeqPhase::Waiting);
}

TEST(Scheduler, AdmitsOnlyWhatTheCacheHolds) {
  Harness h(4, {64, 8});  // 4 blocks of 4 tokens
  Sequence* a = h.add(12);  // 3 blocks
  Sequence* b = h.add(8);   // 2 blocks: does not fit next to a
  auto out = h.step();
  EXPECT_EQ(h.scheduled(out, a), 12);
  EXPECT_EQ(h.scheduled(out, b), 0);
  EXPECT_EQ(b->phase, SeqPhase::Waiting);
  EXPECT_EQ(h.pool.block_table(b->seq_id()), nullptr);  // no blocks left behind
  h.sched.remove(a);
  out = h.step();
  EXPECT_EQ(h.scheduled(out, b), 8);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndRecomputesItLater) {
  Harness h(4, {64, 8});
  Sequence* old_seq = h.add(8);  // 2 blocks each: the cache is full after admission
  Sequence* new_seq = h.add(8);
  h.step();
  ASSERT_TRUE(old_seq->running());
  ASSERT_TRUE(new_seq->running());
  // Both now need a third block for their 9th token; only the older gets one.
  auto out = h.step();
  EXPECT_EQ(h.scheduled(out, old_seq), 1);
  EXPECT_EQ(h.scheduled(out, new_seq), 0);
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], new_seq);
  EXPECT_EQ(new_seq->phase, SeqPhase::Waiting);
  EXPECT_EQ(new_seq->n_computed, 0);
  EXPECT_EQ(new_seq->tokens.size(), 9u);  // its sampled token is kept and will be recomputed
  EXPECT_EQ(h.sched.n_preemptions(), 1);
  h.sched.remove(old_seq);
  out = h.step();
  EXPECT_EQ(h.scheduled(out, new_seq), 9);  // recompute prompt + generated token
}

TEST(Scheduler, TheOldestSequenceKeepsGrowingUntilItHasTheWholeCache) {
  Harness h(6, {64, 8});
  Sequence* a = h.add(4);
  Sequence* b = h.add(4);
  Sequence* c = h.add(4);
  std::vector<Sequence*> preempted;
  for (int i = 0; i < 200 && a->n_computed < 24; ++i) {
    auto out = h.step();
    EXPECT_FALSE(out.empty()) << "step " << i;  // never stuck
    preempted.insert(preempted.end(), out.preempted.begin(), out.preempted.end());
  }
  EXPECT_EQ(a->n_computed, 24);  // all 6 blocks
  EXPECT_EQ(a->n_preemptions, 0);
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), c);  // newest first
  EXPECT_GE(b->n_preemptions, 1);
}

TEST(Scheduler, HigherPriorityIsAdmittedFirst) {
  Harness h(64, {8, 8});
  Sequence* low = h.add(8, 0);
  Sequence* high = h.add(8, 5);
  auto out = h.step();
  EXPECT_EQ(h.scheduled(out, high), 8);
  EXPECT_EQ(h.scheduled(out, low), 0);
}

TEST(Scheduler, PreemptsLowerPriorityBeforeNewer) {
  Harness h(4, {64, 8});
  Sequence* low = h.add(8, 0);   // older, but lower priority
  Sequence* high = h.add(8, 5);
  h.step();
  // Both hold 2 blocks and need a third for their 9th token.
  auto out = h.step();
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], low);
  EXPECT_EQ(h.scheduled(out, high), 1);
}

// --- Priority preemption: a waiting request of higher priority takes the blocks or the slot of
// running lower-priority ones.

TEST(SchedulerPriority, PreemptsTheNewestLowestPriorityForBlocks) {
  Harness h(4, {64, 8});  // 4 blocks of 4 tokens
  Sequence* low_old = h.add(6, 0);  // 2 blocks each, room to grow to 8 tokens: the cache is full
  Sequence* low_new = h.add(6, 0);
  h.step();
  ASSERT_TRUE(low_new->running());
  Sequence* high = h.add(4, 1);  // needs 1 block
  auto out = h.step();
  ASSERT_EQ(out.preempted.size(), 1u);  // one victim frees enough
  EXPECT_EQ(out.preempted[0], low_new);
  EXPECT_EQ(h.scheduled(out, high), 4);
  EXPECT_EQ(h.scheduled(out, low_old), 1);  // its decode still runs
  EXPECT_EQ(h.scheduled(out, low_new), 0);  // its decode was taken back
  EXPECT_EQ(low_new->phase, SeqPhase::Waiting);
  EXPECT_EQ(low_new->n_computed, 0);
  EXPECT_EQ(low_new->n_preemptions, 1);
  EXPECT_EQ(out.n_tokens, 5);
  EXPECT_EQ(h.sched.n_preemptions(), 1);
}

TEST(SchedulerPriority, PreemptsTheLowestPriorityFirstForASlot) {
  Harness h(64, {64, 2});  // plenty of blocks, 2 slots
  Sequence* p0_old = h.add(3, 0);
  Sequence* p1_new = h.add(3, 1);
  h.step();
  Sequence* high = h.add(3, 2);
  auto out = h.step();
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], p0_old);  // lowest priority, though older
  EXPECT_EQ(h.scheduled(out, high), 3);
  EXPECT_EQ(h.scheduled(out, p1_new), 1);
  EXPECT_EQ(h.sched.running().size(), 2u);
  // p0_old waits until a slot frees; p1_new (priority 1) is not preempted for it.
  for (int i = 0; i < 3; ++i) {
    out = h.step();
    EXPECT_TRUE(out.preempted.empty());
    EXPECT_EQ(p0_old->phase, SeqPhase::Waiting);
  }
  h.sched.remove(high);
  out = h.step();
  EXPECT_EQ(h.scheduled(out, p0_old), 4);  // recomputes its prompt and its one token
}

TEST(SchedulerPriority, EqualPrioritiesNeverPreemptForAdmission) {
  for (int priority : {0, 3}) {
    // Block pressure.
    Harness blocks(4, {64, 8});
    blocks.add(6, priority);
    blocks.add(6, priority);
    blocks.step();
    Sequence* late = blocks.add(4, priority);
    for (int i = 0; i < 2; ++i) {
      auto out = blocks.step();
      EXPECT_TRUE(out.preempted.empty());
      EXPECT_EQ(late->phase, SeqPhase::Waiting);
    }
    // The sequence cap.
    Harness cap(64, {64, 2});
    cap.add(3, priority);
    cap.add(3, priority);
    cap.step();
    Sequence* third = cap.add(3, priority);
    auto out = cap.step();
    EXPECT_TRUE(out.preempted.empty());
    EXPECT_EQ(third->phase, SeqPhase::Waiting);
    EXPECT_EQ(cap.sched.n_preemptions() + blocks.sched.n_preemptions(), 0);
  }
}

TEST(SchedulerPriority, LowerPriorityNeverPreemptsHigher) {
  Harness h(64, {64, 1});
  Sequence* high = h.add(3, 5);
  h.step();
  Sequence* low = h.add(3, 0);
  for (int i = 0; i < 3; ++i) {
    auto out = h.step();
    EXPECT_TRUE(out.preempted.empty());
    EXPECT_EQ(h.scheduled(out, high), 1);
    EXPECT_EQ(low->phase, SeqPhase::Waiting);
  }
}

TEST(SchedulerPriority, NothingIsPreemptedWhenVictimsCannotMakeRoom) {
  Harness h(4, {64, 8});
  Sequence* peer = h.add(6, 2);  // 2 blocks at the waiting request's own priority
  Sequence* low = h.add(6, 0);   // 2 blocks: preempting it frees only 2
  h.step();
  Sequence* high = h.add(12, 2);  // needs 3 blocks
  auto out = h.step();
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_TRUE(low->running());
  EXPECT_EQ(h.scheduled(out, low), 1);
  EXPECT_EQ(high->phase, SeqPhase::Waiting);
  EXPECT_EQ(h.pool.block_table(high->seq_id()), nullptr);
  // Once the peer ends, preempting the low one is enough.
  h.sched.remove(peer);
  out = h.step();
  ASSERT_EQ(out.preempted.size(), 1u);  // 2 free blocks + low's 2 >= 3
  EXPECT_EQ(out.preempted[0], low);
  EXPECT_EQ(h.scheduled(out, high), 12);
  EXPECT_EQ(h.scheduled(out, low), 0);
}

TEST(Scheduler, StaticPolicyWaitsForTheWholeBatch) {
  Harness h(64, {64, 2, SchedulePolicy::Static});
  Sequence* a = h.add(3);
  Sequence* b = h.add(3);
  Sequence* c = h.add(3);
  auto out = h.step();
  EXPECT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(c->phase, SeqPhase::Waiting);
  h.sched.remove(a);  // a ends early: its slot idles
  out = h.step();
  EXPECT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(h.scheduled(out, b), 1);
  EXPECT_EQ(c->phase, SeqPhase::Waiting);
  h.sched.remove(b);
  out = h.step();
  EXPECT_EQ(h.scheduled(out, c), 3);
}

TEST(Scheduler, PrefixHitCostsNoBudget) {
  Harness h(64, {64, 8}, /*prefix=*/true);
  Sequence* a = h.add(13);
  h.step();
  h.sched.remove(a);
  Sequence* b = h.add(13);  // same tokens: 3 full blocks cached
  auto out = h.step();
  EXPECT_EQ(h.scheduled(out, b), 1);
  EXPECT_EQ(h.bm.prefix_stats().hit_tokens, 12);
}

}  // namespace
}  // namespace peregrine
