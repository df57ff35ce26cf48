#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

bool runs_before(const Sequence* a, const Sequence* b) {
  if (a->request.priority != b->request.priority) return a->request.priority > b->request.priority;
  return a->arrival < b->arrival;
}

void insert_ordered(std::vector<Sequence*>& list, Sequence* seq) {
  list.insert(std::upper_bound(list.begin(), list.end(), seq, runs_before), seq);
}

void erase_from(std::vector<Sequence*>& list, Sequence* seq) {
  list.erase(std::remove(list.begin(), list.end(), seq), list.end());
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks, StepBudgetConfig budget, DraftPolicyConfig drafts)
    : config_(config),
      blocks_(blocks),
      budget_(config.max_batched_tokens, config.max_seqs, budget),
      drafts_(drafts) {
  if (config_.max_batched_tokens < 1 || config_.max_seqs < 1) {
    throw UsageError("scheduler: max batched tokens and max sequences must be positive");
  }
}

void Scheduler::add(Sequence* seq) {
  seq->phase = SeqPhase::Waiting;
  seq->n_computed = 0;
  insert_ordered(waiting_, seq);
}

void Scheduler::remove(Sequence* seq) {
  erase_from(waiting_, seq);
  erase_from(running_, seq);
  blocks_.free(seq->seq_id());
  seq->phase = SeqPhase::Finished;
}

void Scheduler::preempt(Sequence* seq, int64_t& budget, SchedulerOutput& out) {
  for (auto it = out.chunks.begin(); it != out.chunks.end(); ++it) {
    if (it->seq == seq) {
      budget += it->n_tokens;
      out.n_tokens -= it->n_tokens;
      out.chunks.erase(it);
      break;
    }
  }
  erase_from(running_, seq);
  blocks_.free(seq->seq_id());
  seq->n_computed = 0;
  seq->phase = SeqPhase::Waiting;
  ++seq->n_preemptions;
  ++n_preemptions_;
  insert_ordered(waiting_, seq);
  out.preempted.push_back(seq);
}

// Gives `seq` its next chunk, preempting from the back of the running list until its blocks fit.
// Draft tokens ride along only as far as the budget and the free blocks allow: they are dropped
// before anything is preempted for them. Returns false if `seq` itself was preempted.
bool Scheduler::schedule_running(Sequence* seq, int64_t& budget, SchedulerOutput& out) {
  int64_t n = std::min(seq->n_to_schedule(), budget);
  if (n <= 0) return true;
  if (seq->phase == SeqPhase::Decode && static_cast<int64_t>(seq->draft.size()) > n - 1) {
    seq->draft.resize(static_cast<size_t>(n - 1));
    seq->draft_q.resize(static_cast<size_t>(n - 1));
  }
  while (!blocks_.allocate(seq->seq_id(), seq->n_computed, seq->n_computed + n)) {
    if (!seq->draft.empty()) {
      seq->clear_draft();
      n = 1;
      continue;
    }
    Sequence* victim = last_preemptible();  // never null: `seq` itself is not in flight
    preempt(victim, budget, out);
    if (victim == seq) return false;
  }
  out.chunks.push_back({seq, n});
  out.n_tokens += n;
  budget -= n;
  return true;
}

Sequence* Scheduler::last_preemptible() const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!(*it)->in_flight) return *it;
  }
  return nullptr;
}

// Whether `seq` (its cached prefix attached) can take a sequence slot and the blocks for
// positions [n_computed, n_tokens) now.
bool Scheduler::fits(const Sequence* seq, int64_t n_tokens) const {
  return static_cast<int64_t>(running_.size()) < config_.max_seqs &&
         blocks_.blocks_needed(seq->seq_id(), seq->n_computed, n_tokens) <= blocks_.n_available_blocks();
}

// Priority preemption for the waiting `seq`: preempts running sequences of strictly lower
// priority, lowest first and newest first among equals (the back of running_), until `seq`
// fits. Preempts nothing and returns false if even all of them would not make room.
bool Scheduler::preempt_for(Sequence* seq, int64_t n_tokens, int64_t& budget, SchedulerOutput& out) {
  std::vector<Sequence*> victims;
  for (auto it = running_.rbegin(); it != running_.rend() && (*it)->request.priority < seq->request.priority; ++it) {
    if (!(*it)->in_flight) victims.push_back(*it);
  }
  if (victims.empty()) return false;
  const int64_t slots_short = static_cast<int64_t>(running_.size()) + 1 - config_.max_seqs;
  std::vector<SeqId> ids;
  for (const Sequence* v : victims) ids.push_back(v->seq_id());
  if (slots_short > static_cast<int64_t>(victims.size()) ||
      blocks_.blocks_needed(seq->seq_id(), seq->n_computed, n_tokens) >
          blocks_.n_available_blocks() + blocks_.blocks_released_by(ids)) {
    return false;
  }
  for (Sequence* v : victims) {
    if (fits(seq, n_tokens)) break;
    preempt(v, budget, out);
  }
  return fits(seq, n_tokens);
}

void Scheduler::admit_continuous(int64_t& budget, int64_t seq_cap, SchedulerOutput& out) {
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(out.chunks.size()) < seq_cap) {
    Sequence* seq = waiting_.front();
    // A sequence preempted in this step waits for the next one (no churn within a step).
    if (std::find(out.preempted.begin(), out.preempted.end(), seq) != out.preempted.end()) return;
    const bool slot_free = static_cast<int64_t>(running_.size()) < config_.max_seqs;
    // Without a free slot only priority preemption can admit anything: skip the prefix lookup
    // (and its hit accounting) when no running sequence has a lower priority.
    if (!slot_free && running_.back()->request.priority >= seq->request.priority) return;
    seq->n_computed = blocks_.attach_cached_prefix(seq->seq_id(), seq->tokens);
    const int64_t n = std::min(seq->n_to_compute(), budget);
    if ((!fits(seq, seq->n_computed + n) && !preempt_for(seq, seq->n_computed + n, budget, out)) ||
        !blocks_.allocate(seq->seq_id(), seq->n_computed, seq->n_computed + n)) {
      // FCFS: the head of the queue waits for room rather than being overtaken.
      blocks_.free(seq->seq_id());
      seq->n_computed = 0;
      return;
    }
    waiting_.erase(waiting_.begin());
    seq->phase = SeqPhase::Prefill;
    insert_ordered(running_, seq);
    out.chunks.push_back({seq, n});
    out.n_tokens += n;
    budget -= n;
  }
}

void Scheduler::admit_static() {
  if (!running_.empty()) return;
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < config_.max_seqs) {
    Sequence* seq = waiting_.front();
    waiting_.erase(waiting_.begin());
    seq->n_computed = blocks_.attach_cached_prefix(seq->seq_id(), seq->tokens);
    seq->phase = SeqPhase::Prefill;
    insert_ordered(running_, seq);
  }
}

SchedulerOutput Scheduler::schedule(bool decodes_only) {
  const auto active = static_cast<int64_t>(running_.size() + waiting_.size());
  return schedule(budget_.tokens(running_), budget_.seq_cap(active), decodes_only);
}

void Scheduler::observe_step(const StepShape& step, double ms) {
  budget_.observe(step, ms);
  if (step.prefill_tokens == 0) drafts_.observe_decode_step(step.decode_rows, ms);
}

SchedulerOutput Scheduler::schedule(int64_t token_budget, int64_t seq_cap, bool decodes_only) {
  SchedulerOutput out;
  int64_t budget = std::clamp<int64_t>(token_budget, 1, config_.max_batched_tokens);
  if (config_.policy == SchedulePolicy::Static) admit_static();

  // Decodes first, then prefill chunks; a snapshot because preemption edits running_.
  const std::vector<Sequence*> snapshot = running_;
  for (bool decodes : {true, false}) {
    for (Sequence* seq : snapshot) {
      if (budget <= 0 || static_cast<int64_t>(out.chunks.size()) >= seq_cap) break;
      if (seq->phase != (decodes ? SeqPhase::Decode : SeqPhase::Prefill) || seq->in_flight) continue;
      if (decodes_only && !decodes) break;
      schedule_running(seq, budget, out);
    }
  }
  if (config_.policy == SchedulePolicy::Continuous && out.preempted.empty() && !decodes_only) {
    admit_continuous(budget, seq_cap, out);
  }
  return out;
}

}  // namespace peregrine
