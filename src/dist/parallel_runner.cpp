#include "dist/parallel_runner.h"

#include <algorithm>
#include <memory>

#include "util/error.h"

namespace peregrine::dist {

ParallelRunner::ParallelRunner(Shard& shard) : DistRunner(shard.world()), shard_(shard) {}

ParallelRunner::~ParallelRunner() {
  try {
    shutdown();
  } catch (const std::exception&) {
    // Already reported; the job ends anyway.
  }
}

void ParallelRunner::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  submit(batch, kv);
  collect();
  logits.swap(logits_);
}

void ParallelRunner::submit(const Batch& batch, KvCache& kv) {
  message_.kind = StepKind::Forward;
  message_.batch = batch;
  send_with_journal();
  try {
    shard_.run_stage(batch, kv);
  } catch (const CommError& e) {
    fail(e);
  }
  in_flight_rows_.push_back(
      std::count_if(batch.want_logits.begin(), batch.want_logits.end(), [](uint8_t w) { return w != 0; }));
}

StepResult ParallelRunner::collect() {
  if (in_flight_rows_.empty()) throw UsageError("parallel runner: collect without a step in flight");
  const int64_t rows = in_flight_rows_.front();
  in_flight_rows_.pop_front();
  try {
    shard_.gather_logits(rows, logits_);
  } catch (const CommError& e) {
    fail(e);
  }
  // The final hidden states are on the last stage; with one stage rank 0 holds them whole.
  hidden_.clear();
  if (shard_.place().pp == 1) shard_.model().copy_logits_hidden(hidden_);
  return {logits_, hidden_, {}};
}

namespace {

// A tensor x pipeline worker runs its stage of every step; there are no KV transfers.
class GridWorker final : public WorkerRole {
 public:
  explicit GridWorker(Shard& shard) : shard_(shard) {}
  void forward(const StepMessage& m, KvCache& kv) override { shard_.run_stage(m.batch, kv); }
  void transfer(const KvTransferSpec&, KvCache&) override {
    throw UsageError("worker: a KV transfer arrived in a tensor/pipeline layout");
  }

 private:
  Shard& shard_;
};

}  // namespace

void run_worker(Shard& shard, std::chrono::milliseconds heartbeat_timeout) {
  GridWorker role(shard);
  serve_worker(shard, role, heartbeat_timeout);
}

}  // namespace peregrine::dist
