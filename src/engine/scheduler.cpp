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

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  if (config_.max_batched_tokens < 1 || config_.max_seqs < 1) {
    throw UsageError("scheduler: max batched tokens and max sequences must be positive");
  }
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  seq->n_computed = 0;
  insert_ordered(waiting_, seq);
}

void Scheduler::remove(Sequence* seq) {
  erase_from(waiting_, seq);
  erase_from(running_, seq);
  blocks_.free(seq->seq_id());
  seq->status = SequenceStatus::Finished;
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
  seq->status = SequenceStatus::Waiting;
  ++seq->n_preemptions;
  ++n_preemptions_;
  insert_ordered(waiting_, seq);
  out.preempted.push_back(seq);
}

// Gives `seq` its next chunk, preempting from the back of the running list until its blocks fit.
// Returns false if `seq` itself was preempted.
bool Scheduler::schedule_running(Sequence* seq, int64_t& budget, SchedulerOutput& out) {
  const int64_t n = std::min(seq->n_to_compute(), budget);
  if (n <= 0) return true;
  while (!blocks_.allocate(seq->seq_id(), seq->n_computed, seq->n_computed + n)) {
    Sequence* victim = running_.back();
    preempt(victim, budget, out);
    if (victim == seq) return false;
  }
  out.chunks.push_back({seq, n});
  out.n_tokens += n;
  budget -= n;
  return true;
}

void Scheduler::admit_continuous(int64_t& budget, SchedulerOutput& out) {
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_seqs) {
    Sequence* seq = waiting_.front();
    seq->n_computed = blocks_.attach_cached_prefix(seq->seq_id(), seq->tokens);
    const int64_t n = std::min(seq->n_to_compute(), budget);
    if (!blocks_.allocate(seq->seq_id(), seq->n_computed, seq->n_computed + n)) {
      // FCFS: the head of the queue waits for room rather than being overtaken.
      blocks_.free(seq->seq_id());
      seq->n_computed = 0;
      return;
    }
    waiting_.erase(waiting_.begin());
    seq->status = SequenceStatus::Running;
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
    seq->status = SequenceStatus::Running;
    insert_ordered(running_, seq);
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_batched_tokens;
  if (config_.policy == SchedulePolicy::Static) admit_static();

  // Decodes first, then prefill chunks; a snapshot because preemption edits running_.
  const std::vector<Sequence*> snapshot = running_;
  for (bool decodes : {true, false}) {
    for (Sequence* seq : snapshot) {
      if (budget <= 0) break;
      if (seq->status != SequenceStatus::Running || seq->in_prefill() == decodes) continue;
      schedule_running(seq, budget, out);
    }
  }
  if (config_.policy == SchedulePolicy::Continuous && out.preempted.empty()) admit_continuous(budget, out);
  return out;
}

}  // namespace peregrine
