#include "dist/dist_runner.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "util/error.h"

namespace peregrine::dist {

void StepSender::send(const StepMessage& m) {
  // Messages every rank took give their buffers back (in order: one not taken keeps the later
  // ones, which is rare and costs only memory).
  auto all_done = [](Outgoing& o) {
    return std::all_of(o.sends.begin(), o.sends.end(), [](const auto& p) { return p->done(); });
  };
  while (!pending_.empty() && (pending_.size() >= kMaxPending || all_done(pending_.front()))) {
    for (auto& p : pending_.front().sends) p->wait();
    pending_.front().sends.clear();
    spare_.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  Outgoing o;
  if (!spare_.empty()) {
    o = std::move(spare_.back());
    spare_.pop_back();
  }
  encode(m, o.bytes);
  pending_.push_back(std::move(o));
  Outgoing& out = pending_.back();  // deque: the buffer stays where it is while later ones are added
  for (int r = 1; r < group_.size(); ++r) out.sends.push_back(group_.start_send(out.bytes, r, kTagStep));
}

void StepSender::wait_all() {
  for (Outgoing& o : pending_) {
    for (auto& p : o.sends) p->wait();
    o.sends.clear();
  }
  pending_.clear();
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

void send_digest(Communicator& world, const KvCache& kv) {
  std::vector<uint64_t> digests(static_cast<size_t>(world.size()));
  const uint64_t mine = kv.pool().digest();
  world.all_gather(std::as_bytes(std::span<const uint64_t>(&mine, 1)),
                   std::as_writable_bytes(std::span<uint64_t>(digests)));
}

void serve_worker(Shard& shard, WorkerRole& role, std::chrono::milliseconds heartbeat_timeout) {
  Communicator& world = shard.world();
  std::unique_ptr<KvCache> kv;
  StepMessage m;
  std::vector<std::byte> scratch;
  auto cache = [&]() -> KvCache& {
    if (!kv) throw UsageError("worker: a step arrived before any KV cache was bound");
    return *kv;
  };
  auto apply_journal = [&] {
    for (const KvOp& op : m.journal) {
      cache().pool().apply(op);
      role.applied(op);
    }
  };
  while (true) {
    receive_step(world, m, scratch, heartbeat_timeout);
    switch (m.kind) {
      case StepKind::Shutdown:
        shard.finish_sends();
        return;
      case StepKind::Heartbeat:
        break;
      case StepKind::BindCache:
        kv.reset();  // free the old cache first
        role.bound();
        kv = std::make_unique<KvCache>(shard.model().make_kv_cache(m.cache.type, m.cache.n_blocks, m.cache.block_size));
        break;
      case StepKind::Forward:
        apply_journal();
        role.forward(m, cache());
        break;
      case StepKind::KvTransfer:
        apply_journal();
        role.transfer(m.transfer, cache());
        break;
      case StepKind::CheckMirror:
        apply_journal();
        send_digest(world, cache());
        break;
    }
  }
}

DistRunner::DistRunner(Communicator& world) : world_(world), sender_(world) {
  if (world.rank() != 0) throw UsageError("distributed runner: only world rank 0 drives the engine");
}

void DistRunner::fail(const std::exception& e) {
  failed_ = true;
  const std::string what = std::string("a process of the layout failed: ") + e.what();
  std::fprintf(stderr, "peregrine: rank 0: %s\n", what.c_str());
  std::fflush(stderr);
  if (on_failure_) on_failure_(what);
  throw RunnerFailure(what);
}

void DistRunner::send(const StepMessage& m) {
  if (failed_) throw RunnerFailure("a rank of the model failed earlier");
  if (stopped_) throw UsageError("distributed runner: used after shutdown");
  try {
    throw_if_stop_requested();
    sender_.send(m);
  } catch (const CommError& e) {
    fail(e);
  }
}

void DistRunner::send_with_journal() {
  observe_journal(journal_);
  message_.journal.swap(journal_);
  journal_.clear();
  send(message_);
}

void DistRunner::bind_cache(KvCache& kv) {
  journal_.clear();
  kv.pool().set_journal(&journal_);
  message_.kind = StepKind::BindCache;
  message_.cache = {kv.storage().type(), kv.pool().n_blocks(), kv.pool().block_size()};
  send(message_);
}

void DistRunner::unbind_cache(KvCache& kv) {
  kv.pool().set_journal(nullptr);
  journal_.clear();
}

void DistRunner::idle() {
  if (failed_ || stopped_) return;
  message_.kind = StepKind::Heartbeat;
  try {
    send(message_);
  } catch (const RunnerFailure&) {
    // Reported by fail(); the next step ends every request.
  }
}

std::vector<int> DistRunner::check_mirrors(const KvCache& kv) {
  settle();
  message_.kind = StepKind::CheckMirror;
  send_with_journal();
  std::vector<uint64_t> digests(static_cast<size_t>(world_.size()));
  const uint64_t mine = kv.pool().digest();
  try {
    world_.all_gather(std::as_bytes(std::span<const uint64_t>(&mine, 1)),
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

void DistRunner::shutdown() {
  if (failed_ || stopped_) return;
  message_.kind = StepKind::Shutdown;
  send(message_);
  try {
    sender_.wait_all();
    finish_sends();
  } catch (const CommError& e) {
    fail(e);
  }
  stopped_ = true;
}

}  // namespace peregrine::dist
