#pragma once
// The engine's runner on world rank 0 of a tensor x pipeline parallel layout, and the loop the
// other ranks run. Before each step rank 0 sends every rank one StepMessage (dist_runner.h): the KV
// journal since the last step and the batch. Every rank applies the journal to its own shard of
// the cache, then runs its stage of the step (Shard::run_stage). With P stages, P steps are in
// flight: rank 0 runs stage 0 of the next step while the later stages work on earlier ones, and
// collects each step's logits from the last stage in order.
#include <deque>
#include <memory>
#include <vector>

#include "dist/dist_runner.h"
#include "dist/shard.h"

namespace peregrine::dist {

class ParallelRunner final : public DistRunner {
 public:
  explicit ParallelRunner(Shard& shard);
  ~ParallelRunner() override;  // tells the workers to leave their loop (unless the job failed)

  const ModelConfig& config() const override { return shard_.model().config(); }
  KvShape kv_shape() const override { return shard_.model().kv_shape(); }
  std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) override {
    return shard_.model().context().allocate_kv(spec);
  }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override;
  int max_in_flight() const override { return shard_.place().pp; }
  void submit(const Batch& batch, KvCache& kv) override;
  StepResult collect() override;

 private:
  void finish_sends() override { shard_.finish_sends(); }

  Shard& shard_;
  std::deque<int64_t> in_flight_rows_;  // logits rows of each submitted step not yet collected
  std::vector<float> logits_, hidden_;  // the last collected step's logits and final hidden states
};

// A worker rank's life: build a KV cache when told, apply each step's journal and run the step,
// until Shutdown. `heartbeat_timeout`: how long rank 0 may stay silent. Throws CommError when
// rank 0 is silent too long or a step fails to complete, UsageError when a mirror diverges.
void run_worker(Shard& shard, std::chrono::milliseconds heartbeat_timeout);

}  // namespace peregrine::dist
