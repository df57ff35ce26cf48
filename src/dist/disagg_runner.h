#pragma once
// Disaggregated prefill and decode over two pools of ranks (--disaggregate P:D): world ranks
// [0, D) are the decode pool, [D, D + P) the prefill pool, each pool a tensor-parallel group of
// its own (a Shard: rank r of a pool of T holds the heads and rows of tensor-parallel rank r of T;
// one rank holds the whole model). World rank 0 runs the engine (scheduler, prefix cache,
// sampling) and leads the decode pool, so it never computes a prompt: the decode steps go on at
// their own pace while a prompt step runs in the prefill pool. Every cache has the same blocks:
// every rank applies rank 0's KV journal, so a block id means the same everywhere; each rank
// fills only its heads.
//
// The engine uses two lanes (ModelRunner::prefill_lane):
//   prefill lane (PrefillLane): submit sends every rank the prompt rows (with the journal) and
//     returns; the prefill pool computes them and sends rank 0 its vocabulary slices of their logits.
//     done() looks for those without waiting; collect receives them, then for each
//     prompt the step completed sends every rank a KvTransfer (sequence, length, block ids), on
//     which each prefill rank sends each decode rank the KV heads both hold (each head from the
//     lowest prefill rank holding it; every layer; with a checksum), stored under the same block
//     ids. The sequence decodes from the engine's next step on.
//   decode lane (submit/collect, or forward): rank 0 sends every rank the decode rows, computes its
//     share with the rest of the decode pool and gathers the logits; each other decode rank also
//     names the sequences whose K/V arrived damaged.
// Prefill ranks busy with a prompt take the decode steps' messages (only their journals concern
// them) when they are done; rank 0 never waits for them (StepSender keeps each message until
// taken). forward() takes a batch of both kinds at once (the prompt rows in the prefill pool, the
// decode rows beside them) and returns when both are done.
// A sequence whose transfer arrived damaged ends with an error at its first decode step (never
// lost, never decoded from bad K/V); the others go on. A preempted sequence is prefilled again
// and sent again. Prefix caching stays in the prefill pool over the prompt blocks it computed
// (the engine commits blocks to the prefix cache only when a prompt step lands); blocks written by
// decode steps are never offered as a prefix.
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dist/dist_runner.h"
#include "dist/layout.h"
#include "dist/shard.h"

namespace peregrine::dist {

class DisaggRunner final : public DistRunner {
 public:
  // `shard`: world rank 0's part of the decode pool.
  DisaggRunner(Shard& shard, const Layout& layout);
  ~DisaggRunner() override;

  const ModelConfig& config() const override { return shard_.model().config(); }
  KvShape kv_shape() const override { return shard_.model().kv_shape(); }
  std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) override {
    return shard_.model().context().allocate_kv(spec);
  }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override;
  StepResult collect() override { return {submitted_, {}, failed_}; }
  PrefillLane* prefill_lane() override { return &lane_; }

  // Transfers received since the start, and the bytes rank 0 received for them (for the figures).
  int64_t transfers() const { return transfers_; }
  int64_t transfer_bytes() const { return transfer_bytes_; }

 private:
  // The prompt step in the prefill pool, from submit to collect.
  struct PromptStep {
    bool in_flight = false;              // sent, its logits not yet received
    bool finished = false;               // received (and its prompts moved), not yet collected
    int64_t rows = 0;                    // logits rows
    std::map<SeqId, int64_t> completed;  // the prompts it completes (a row wants logits): their length
    KvCache* kv = nullptr;
    std::chrono::steady_clock::time_point start;
    std::vector<float> logits;  // [rows][n_vocab] once finished
  };

  // The prefill lane's calls, on the runner's state.
  class Lane final : public PrefillLane {
   public:
    explicit Lane(DisaggRunner& r) : r_(r) {}
    void submit(const Batch& batch, KvCache& kv) override { r_.submit_prefill(batch, kv); }
    bool done() override { return r_.prefill_done(); }
    StepResult collect() override { return r_.collect_prefill(); }

   private:
    DisaggRunner& r_;
  };

  void submit_prefill(const Batch& batch, KvCache& kv);
  bool prefill_done();
  StepResult collect_prefill();
  void observe_journal(const KvJournal& journal) override;
  void settle() override;
  void forget_released(const KvJournal& journal);  // released / truncated sequences leave the decode pool
  void split(const Batch& batch);
  void start_prompts(KvCache& kv);
  void finish_prompts();
  void run_decode(KvCache& kv, std::vector<float>& logits);
  void receive_damaged();
  void transfer(SeqId seq, int64_t length, KvCache& kv);
  void finish_sends() override { shard_.finish_sends(); }

  Shard& shard_;
  Layout layout_;
  std::map<SeqId, int64_t> resident_;  // sequences whose K/V is in the decode pool: positions [0, n) there
  std::set<SeqId> damaged_;            // sequences whose K/V reached this rank damaged
  size_t journal_seen_ = 0;            // entries of the unsent journal forget_released() has looked at
  Batch prompt_, decode_;
  std::vector<uint8_t> row_is_decode_;  // per logits row of a forward(), in batch order
  PromptStep step_;
  std::vector<float> decode_logits_, part_;
  std::vector<std::byte> status_, part_bytes_;
  std::vector<std::pair<SeqId, std::string>> failed_;  // the last decode step's (forward)
  Lane lane_{*this};
  int64_t transfers_ = 0, transfer_bytes_ = 0;
};

// A worker's life in a disaggregated layout (world rank > 0): mirror rank 0's blocks; in the
// decode pool run the decode rows, answer with their logits and damaged sequences, and store the
// transfers; in the prefill pool run the prompt rows and send K/V transfers; until Shutdown.
void run_disagg_worker(Shard& shard, const Layout& layout, std::chrono::milliseconds heartbeat_timeout);

}  // namespace peregrine::dist
