#pragma once
// The engine's runner on world rank 0 of a tensor x pipeline parallel layout, and the loop the
// other ranks run. Rank 0 owns every decision (EngineCore: scheduler, BlockManager, prefix cache,
// sampling); before each step it broadcasts one StepMessage to all ranks: the KV journal since the
// last step (kv/kv_journal.h: which block ids each sequence gained, shared, copied or gave back)
// and the batch. Every rank applies the journal to its own shard of the cache, so block ids mean
// the same on every rank, then runs Shard::execute.
//
// Failures: a CommError (a rank dead or silent past the timeout) is reported on stderr at once,
// becomes RunnerFailure (the engine ends every request with the message), and the runner sends
// nothing more; on_failure lets the command end the job. Workers wait for rank 0 at most the
// heartbeat timeout; an idle rank 0 sends a heartbeat every second.
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "dist/shard.h"
#include "dist/step_message.h"
#include "engine/model_runner.h"

namespace peregrine::dist {

// Rank 0's side of the step messages: one point-to-point send to every other rank, in the
// background (a rank still busy with the previous step takes it when it is ready; rank 0 does not
// wait for it), from two buffers used in turn.
class StepSender {
 public:
  explicit StepSender(Communicator& group) : group_(group) {}
  void send(const StepMessage& m);
  void wait_all();  // every send so far has completed

 private:
  Communicator& group_;
  std::vector<std::byte> buffers_[2];
  std::vector<std::unique_ptr<PendingSend>> pending_[2];
  int next_ = 0;
};
class ParallelRunner final : public ModelRunner {
 public:
  explicit ParallelRunner(Shard& shard);
  ~ParallelRunner() override;  // tells the workers to leave their loop (unless the job failed)

  const ModelConfig& config() const override { return shard_.model().config(); }
  KvShape kv_shape() const override { return shard_.model().kv_shape(); }
  void bind_cache(KvCache& kv) override;
  void unbind_cache(KvCache& kv) override;
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override;
  // With P stages, P steps in flight: rank 0 runs stage 0 of the next step while the later stages
  // work on earlier ones.
  int max_in_flight() const override { return shard_.place().pp; }
  void submit(const Batch& batch, KvCache& kv) override;
  void collect(std::vector<float>& logits) override;
  std::span<const float> logits_hidden() const override;
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

 private:
  void send(const StepMessage& m);
  [[noreturn]] void fail(const std::exception& e);

  Shard& shard_;
  StepSender sender_;
  KvJournal journal_;
  StepMessage message_;
  std::deque<int64_t> in_flight_rows_;  // logits rows of each submitted step not yet collected
  bool failed_ = false, stopped_ = false;
  std::function<void(const std::string&)> on_failure_;
};

// A worker rank's life: build a KV cache when told, apply each step's journal and run the step,
// until Shutdown. `heartbeat_timeout`: how long rank 0 may stay silent. Throws CommError when
// rank 0 is silent too long or a step fails to complete, UsageError when a mirror diverges.
void run_worker(Shard& shard, std::chrono::milliseconds heartbeat_timeout);

// A worker's side: the next step message from rank 0, waiting at most `timeout`.
void receive_step(Communicator& group, StepMessage& m, std::vector<std::byte>& scratch,
                  std::chrono::milliseconds timeout);

}  // namespace peregrine::dist
