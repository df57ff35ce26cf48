#pragma once
// What every runner on world rank 0 of a distributed layout shares, whatever the layout (tensor x
// pipeline grid, or disaggregated prefill/decode): rank 0 owns every decision (EngineCore:
// scheduler, BlockManager, prefix cache, sampling) and sends the other ranks StepMessages: the KV
// journal since the last message (kv/kv_journal.h: which block ids each sequence gained, shared,
// copied or gave back), so block ids mean the same on every rank, with the work of the step.
//
// Failures: a CommError (a rank dead or silent past the timeout) is reported on stderr at once,
// becomes RunnerFailure (the engine ends every request with the message), and the runner sends
// nothing more; on_failure lets the command end the job. Workers wait for rank 0 at most the
// heartbeat timeout; an idle rank 0 sends a heartbeat every second.
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/shard.h"
#include "dist/step_message.h"
#include "engine/model_runner.h"

namespace peregrine::dist {

// Rank 0's side of the step messages: one point-to-point send to every other rank, in the
// background (a rank still busy with an earlier step takes it when it is ready; rank 0 does not
// wait for it: a prefill pool busy with a long prompt must not hold up the decode steps), each
// message in a buffer of its own until every rank took it. Past kMaxPending messages not yet
// taken, send waits for the oldest.
class StepSender {
 public:
  static constexpr size_t kMaxPending = 256;
  explicit StepSender(Communicator& group) : group_(group) {}
  void send(const StepMessage& m);
  void wait_all();  // every send so far has completed

 private:
  struct Outgoing {
    std::vector<std::byte> bytes;
    std::vector<std::unique_ptr<PendingSend>> sends;
  };
  Communicator& group_;
  std::deque<Outgoing> pending_;  // oldest first
  std::vector<Outgoing> spare_;   // buffers to reuse
};

class DistRunner : public ModelRunner {
 public:
  explicit DistRunner(Communicator& world);
  // The derived runner's destructor calls shutdown(): the workers leave their loop (unless the job
  // failed).
  ~DistRunner() override = default;

  void bind_cache(KvCache& kv) override;
  void unbind_cache(KvCache& kv) override;
  std::chrono::milliseconds idle_interval() const override { return std::chrono::milliseconds(1000); }
  void idle() override;

  // Asks every rank for the digest of its KV bookkeeping; returns the ranks whose digest differs
  // from rank 0's (empty: every mirror agrees).
  std::vector<int> check_mirrors(const KvCache& kv);
  // Tells the workers to leave their loop; later calls do nothing. Throws RunnerFailure when they
  // cannot be reached.
  void shutdown();
  bool failed() const { return failed_; }
  // Called once, on the engine's thread, after a failure was reported.
  void set_on_failure(std::function<void(const std::string&)> fn) { on_failure_ = std::move(fn); }

 protected:
  // Sends `message_` with the journal so far (shipped: the journal starts again; observe_journal
  // sees it first).
  void send_with_journal();
  virtual void observe_journal(const KvJournal&) {}
  // Before a mirror check: every step in flight finishes, so every rank's bookkeeping is final.
  virtual void settle() {}
  void send(const StepMessage& m);
  [[noreturn]] void fail(const std::exception& e);
  // Waits for sends the derived runner left in the background (before shutdown completes).
  virtual void finish_sends() {}

  Communicator& world_;
  StepSender sender_;
  KvJournal journal_;
  StepMessage message_;

 private:
  bool failed_ = false, stopped_ = false;
  std::function<void(const std::string&)> on_failure_;
};

// A worker's side: the next step message from rank 0, waiting at most `timeout`.
void receive_step(Communicator& group, StepMessage& m, std::vector<std::byte>& scratch,
                  std::chrono::milliseconds timeout);
// A worker's answer to CheckMirror: its cache's digest, gathered on every rank.
void send_digest(Communicator& world, const KvCache& kv);

// What a worker does with the messages whose meaning depends on the layout; the rest (heartbeats,
// binding a cache, applying the journal, mirror checks, shutdown) is the same for every worker.
class WorkerRole {
 public:
  virtual ~WorkerRole() = default;
  virtual void forward(const StepMessage& m, KvCache& kv) = 0;
  virtual void transfer(const KvTransferSpec& t, KvCache& kv) = 0;
  virtual void applied(const KvOp&) {}  // after each journal entry is applied to the cache
  virtual void bound() {}               // a fresh cache replaces the old one
};

// A worker's life (world rank > 0): its shard's cache mirrors rank 0's blocks, each message is
// handled in order (the role for Forward and KvTransfer), until Shutdown. Throws CommError when
// rank 0 is silent past `heartbeat_timeout`.
void serve_worker(Shard& shard, WorkerRole& role, std::chrono::milliseconds heartbeat_timeout);

}  // namespace peregrine::dist
