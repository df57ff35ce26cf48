#include "dist/parallel_runner.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "util/error.h"

namespace peregrine::dist {

void StepSender::send(const StepMessage& m) {
  // The buffer about to be reused was sent two messages ago: those sends must be done.
  for (auto& p : pending_[next_]) p->wait();
  pending_[next_].clear();
  std::vector<std::byte>& bytes = buffers_[next_];
  encode(m, bytes);
  for (int r = 1; r < group_.size(); ++r) pending_[next_].push_back(group_.start_send(bytes, r, kTagStep));
  next_ ^= 1;
}

void StepSender::wait_all() {
  for (auto& list : pending_) {
    for (auto& p : list) p->wait();
    list.clear();
  }
}

void receive_step(Communicator& group, StepMessage& m, std::vector<std::byte>& scratch,
                  std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds step_timeout = group.timeout();
  group.set_timeout(timeout);  // only the wait for the next message may last as long as rank 0 idles
  try {
    group.recv_message(scratch, 0, kTagStep);
  } catch (const CommError&) {
    group.set_timeout(step_timeout);
    throw CommError("rank 0 sent nothing (not even a heartbeat) for " + std::to_string(timeout.count() / 1000) +
                    " s: it is dead or hung");
  }
  group.set_timeout(step_timeout);
  decode(scratch, m);
}

ParallelRunner::ParallelRunner(Shard& shard) : shard_(shard), sender_(shard.world()) {
  if (shard.world().rank() != 0) throw UsageError("parallel runner: only world rank 0 drives the engine");
}

ParallelRunner::~ParallelRunner() {
  try {
    shutdown();
  } catch (const std::exception&) {
    // Already reported; the job ends anyway.
  }
}

void ParallelRunner::fail(const std::exception& e) {
  failed_ = true;
  const std::string what = std::string("a process of the layout failed: ") + e.what();
  std::fprintf(stderr, "peregrine: rank 0: %s\n", what.c_str());
  std::fflush(stderr);
  if (on_failure_) on_failure_(what);
  throw RunnerFailure(what);
}

void ParallelRunner::send(const StepMessage& m) {
  if (failed_) throw RunnerFailure("a rank of the model failed earlier");
  if (stopped_) throw UsageError("parallel runner: used after shutdown");
  try {
    throw_if_stop_requested();
    sender_.send(m);
  } catch (const CommError& e) {
    fail(e);
  }
}

void ParallelRunner::bind_cache(KvCache& kv) {
  journal_.clear();
  kv.set_journal(&journal_);
  message_.kind = StepKind::BindCache;
  message_.cache = {kv.type(), kv.n_blocks(), kv.block_size()};
  send(message_);
}

void ParallelRunner::unbind_cache(KvCache& kv) {
  kv.set_journal(nullptr);
  journal_.clear();
}

void ParallelRunner::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  submit(batch, kv);
  collect(logits);
}

void ParallelRunner::submit(const Batch& batch, KvCache& kv) {
  message_.kind = StepKind::Forward;
  message_.journal.swap(journal_);
  message_.batch = batch;
  journal_.clear();
  send(message_);
  try {
    shard_.run_stage(batch, kv);
  } catch (const CommError& e) {
    fail(e);
  }
  in_flight_rows_.push_back(
      std::count_if(batch.want_logits.begin(), batch.want_logits.end(), [](uint8_t w) { return w != 0; }));
}

void ParallelRunner::collect(std::vector<float>& logits) {
  if (in_flight_rows_.empty()) throw UsageError("parallel runner: collect without a step in flight");
  const int64_t rows = in_flight_rows_.front();
  in_flight_rows_.pop_front();
  try {
    shard_.gather_logits(rows, logits);
  } catch (const CommError& e) {
    fail(e);
  }
}

std::span<const float> ParallelRunner::logits_hidden() const {
  // The final hidden states are on the last stage; with one stage rank 0 holds them whole.
  if (shard_.place().pp > 1) return {};
  return shard_.model().logits_hidden();
}

void ParallelRunner::idle() {
  if (failed_ || stopped_) return;
  message_.kind = StepKind::Heartbeat;
  try {
    send(message_);
  } catch (const RunnerFailure&) {
    // Reported by fail(); the next step ends every request.
  }
}

std::vector<int> ParallelRunner::check_mirrors(const KvCache& kv) {
  message_.kind = StepKind::CheckMirror;
  message_.journal.swap(journal_);
  journal_.clear();
  send(message_);
  std::vector<uint64_t> digests(static_cast<size_t>(shard_.world().size()));
  const uint64_t mine = kv.digest();
  try {
    shard_.world().all_gather(std::as_bytes(std::span<const uint64_t>(&mine, 1)),
                              std::as_writable_bytes(std::span<uint64_t>(digests)));
  } catch (const CommError& e) {
    fail(e);
  }
  std::vector<int> differ;
  for (size_t r = 1; r < digests.size(); ++r) {
    if (digests[r] != mine) differ.push_back(static_cast<int>(r));
  }
  return differ;
}

void ParallelRunner::shutdown() {
  if (failed_ || stopped_) return;
  message_.kind = StepKind::Shutdown;
  send(message_);
  try {
    sender_.wait_all();
    shard_.finish_sends();
  } catch (const CommError& e) {
    fail(e);
  }
  stopped_ = true;
}

void run_worker(Shard& shard, std::chrono::milliseconds heartbeat_timeout) {
  Communicator& world = shard.world();
  std::unique_ptr<KvCache> kv;
  StepMessage m;
  std::vector<std::byte> scratch;
  auto cache = [&]() -> KvCache& {
    if (!kv) throw UsageError("worker: a step arrived before any KV cache was bound");
    return *kv;
  };
  while (true) {
    receive_step(world, m, scratch, heartbeat_timeout);
    switch (m.kind) {
      case StepKind::Shutdown:
        shard.finish_sends();
        return;
      case StepKind::Heartbeat: break;
      case StepKind::BindCache:
        kv.reset();  // free the old shard first
        kv = std::make_unique<KvCache>(shard.model().kv_shape(), m.cache.type, m.cache.n_blocks, m.cache.block_size);
        break;
      case StepKind::Forward:
        for (const KvOp& op : m.journal) cache().apply(op);
        shard.run_stage(m.batch, cache());
        break;
      case StepKind::CheckMirror: {
        for (const KvOp& op : m.journal) cache().apply(op);
        std::vector<uint64_t> digests(static_cast<size_t>(world.size()));
        const uint64_t mine = cache().digest();
        world.all_gather(std::as_bytes(std::span<const uint64_t>(&mine, 1)),
                         std::as_writable_bytes(std::span<uint64_t>(digests)));
        break;
      }
    }
  }
}

}  // namespace peregrine::dist
