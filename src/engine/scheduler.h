#pragma once
// Iteration-level scheduling (Orca / vLLM): before every forward pass, decide which sequences run
// and how many of their tokens, under a token budget and a sequence cap. The Scheduler owns the
// policies that size a step: StepBudget (step_budget.h: the token budget, latency-aware with a
// step-time budget, and the sequence cap, a pipeline's share) and DraftPolicy (draft_policy.h:
// which decoding sequences propose drafts and how many).
//
// Continuous policy, per step:
//   1. running decodes (one token each), in priority/arrival order;
//   2. running prefills, in chunks that fit the remaining budget (chunked prefill: a long prompt
//      rides along with the decodes instead of stalling them);
//   3. waiting requests, in priority/arrival order, while the budget, the sequence cap and the
//      KV cache allow (prefix-cached blocks are attached first, so a hit costs no budget). The
//      head of the queue is never overtaken: if it does not fit, admission stops (FCFS).
//   When a running sequence needs a block and none is left, the newest (lowest priority, latest
//   arrival) running sequence is preempted: its blocks are freed and it goes back to waiting to
//   be recomputed later. Nothing is admitted in a step that preempted this way.
//   Priority preemption: when the head of the queue lacks KV blocks or a sequence slot, running
//   sequences of strictly lower priority are preempted for it (lowest priority first, newest
//   first among equals) -- but only if preempting all of them would make room, so none is
//   preempted for nothing. Equal or higher priorities are never preempted for admission, so with
//   equal priorities this is plain FCFS. Priorities are strict: a steady stream of
//   higher-priority work can starve lower-priority requests (there is no aging).
// Static policy (for comparison): a batch of up to max_seqs requests is admitted only when
// nothing runs, and runs until its last member ends; freed slots idle.
#include <cstdint>
#include <vector>

#include "engine/draft_policy.h"
#include "engine/sequence.h"
#include "engine/step_budget.h"
#include "kv/block_manager.h"

namespace peregrine {

enum class SchedulePolicy { Continuous, Static };

struct SchedulerConfig {
  int64_t max_batched_tokens = 512;  // tokens per forward pass
  int64_t max_seqs = 64;             // sequences per forward pass
  SchedulePolicy policy = SchedulePolicy::Continuous;
};

struct ScheduledChunk {
  Sequence* seq;       // not owned
  int64_t n_tokens;    // tokens [seq->n_computed, seq->n_computed + n_tokens) run this step
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // preempted during this step (now waiting)
  int64_t n_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // Throws UsageError for non-positive limits.
  Scheduler(SchedulerConfig config, BlockManager& blocks, StepBudgetConfig budget = {}, DraftPolicyConfig drafts = {});

  const SchedulerConfig& config() const { return config_; }
  // Queues a new sequence (SeqPhase::Waiting). Sequences are owned by the caller.
  void add(Sequence* seq);
  // Takes a sequence out of the scheduler (finished or cancelled), freeing its blocks.
  void remove(Sequence* seq);
  // The proposals of this step (DraftPolicy::choose over the running sequences); call before
  // schedule(), which counts the drafts against the token budget.
  const DraftChoice& choose_drafts(int64_t context_length) { return drafts_.choose(running_, context_length); }
  // One step under the StepBudget's token budget and sequence cap. Sequences in flight (in a step
  // not yet returned) are neither scheduled nor preempted. decodes_only: only sequences that
  // decode (SeqPhase::Decode) run and nothing is admitted (disaggregated prefill/decode while
  // the prefill pool is busy with a prompt step).
  SchedulerOutput schedule(bool decodes_only = false);
  // A step landed: what it ran and how long it took (the step-time model and the draft policy's
  // costs learn from it).
  void observe_step(const StepShape& step, double ms);
  const StepBudget& budget() const { return budget_; }
  DraftPolicy& drafts() { return drafts_; }

  const std::vector<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  int64_t n_preemptions() const { return n_preemptions_; }

 private:
  SchedulerOutput schedule(int64_t token_budget, int64_t seq_cap, bool decodes_only);
  bool schedule_running(Sequence* seq, int64_t& budget, SchedulerOutput& out);
  bool preempt_for(Sequence* seq, int64_t n_tokens, int64_t& budget, SchedulerOutput& out);
  bool fits(const Sequence* seq, int64_t n_tokens) const;
  void preempt(Sequence* seq, int64_t& budget, SchedulerOutput& out);
  void admit_continuous(int64_t& budget, int64_t seq_cap, SchedulerOutput& out);
  Sequence* last_preemptible() const;  // the back of running_ that is not in flight
  void admit_static();

  SchedulerConfig config_;
  BlockManager& blocks_;
  StepBudget budget_;
  DraftPolicy drafts_;
  std::vector<Sequence*> waiting_;  // ordered by (priority desc, arrival asc)
  std::vector<Sequence*> running_;  // same order; back() is the first to preempt
  int64_t n_preemptions_ = 0;
};

}  // namespace peregrine
