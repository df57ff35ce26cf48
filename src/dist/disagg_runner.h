#pragma once
// Disaggregated prefill and decode over two pools of ranks (--disaggregate P:D): world ranks
// [0, P) are the prefill pool, [P, P + D) the decode pool, each pool a tensor-parallel group of its
// own (a Shard: rank r of a pool of T holds the heads and rows of tensor-parallel rank r of T;
// one rank holds the whole model). World rank 0 runs the engine (scheduler, prefix cache,
// sampling) and leads the prefill pool. Every cache has the same blocks: every rank applies rank
// 0's KV journal, so a block id means the same everywhere; each rank fills only its heads.
//
// One step, as rank 0 runs it:
//   1. rows are split: a sequence's single row at the position its K/V in the decode pool ends
//      at is a decode row; every other row is a prompt row;
//   2. rank 0 sends every rank the prompt rows and the decode rows (with the journal); the prefill
//      pool computes the prompt rows (its vocabulary slices' logits to rank 0) while the decode
//      pool computes the decode rows (logits to rank 0, and each decode rank's list of sequences
//      whose K/V arrived damaged);
//   3. for each prompt this step completed, every prefill rank sends every decode rank the KV heads
//      both hold (each head from the lowest prefill rank holding it; every layer; with a checksum),
//      which the decode rank stores under the same block ids before its first decode.
// A sequence whose transfer arrived damaged ends with an error at its first decode step (never
// lost, never decoded from bad K/V); the others go on. A preempted sequence is prefilled again
// and sent again. Prefix caching stays in the prefill pool over the prompt blocks it computed
// (local_kv_length); blocks written by decode steps are never offered as a prefix.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dist/dist_runner.h"
#include "dist/layout.h"
#include "dist/shard.h"

namespace peregrine::dist {

class DisaggRunner final : public DistRunner {
 public:
  // `shard`: world rank 0's part of the prefill pool.
  DisaggRunner(Shard& shard, const Layout& layout);
  ~DisaggRunner() override;

  const ModelConfig& config() const override { return shard_.model().config(); }
  KvShape kv_shape() const override { return shard_.model().kv_shape(); }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override;
  std::span<const float> logits_hidden() const override { return {}; }
  int64_t local_kv_length(SeqId seq, int64_t n_computed) const override;
  bool releases_windowed_blocks() const override { return false; }  // transfer() ships every prompt block
  std::vector<std::pair<SeqId, std::string>> take_failed_sequences() override;

  // Transfers sent, and the bytes rank 0 sent for them, since the start (for the figures).
  int64_t transfers() const { return transfers_; }
  int64_t transfer_bytes() const { return transfer_bytes_; }

 private:
  void forget_released();  // the journal's released / truncated sequences leave the decode pool
  void split(const Batch& batch);
  void receive_decode_results();
  void transfer(SeqId seq, int64_t length, KvCache& kv);
  void finish_sends() override { shard_.finish_sends(); }

  Shard& shard_;
  Layout layout_;
  std::map<SeqId, int64_t> resident_;  // sequences whose K/V is in the decode pool: positions [0, n) there
  std::map<SeqId, int64_t> local_;     // positions [0, n) of the sequence computed here
  size_t journal_seen_ = 0;            // journal entries forget_released() has looked at
  Batch prompt_, decode_;
  std::vector<uint8_t> row_is_decode_;  // per logits row of the step, in batch order
  std::vector<float> prompt_logits_, decode_logits_, part_;
  std::vector<std::byte> status_, part_bytes_;
  std::vector<std::pair<SeqId, std::string>> failed_;
  int64_t transfers_ = 0, transfer_bytes_ = 0;
  int64_t damage_transfer_ = 0;  // PEREGRINE_TEST_DAMAGE_KV_TRANSFER: the n-th transfer's checksum is wrong
};

// A worker's life in a disaggregated layout (world rank > 0): mirror rank 0's blocks; in the
// prefill pool run the prompt rows and send K/V transfers, in the decode pool run the decode rows,
// answer with their logits and damaged sequences, and store the transfers; until Shutdown.
void run_disagg_worker(Shard& shard, const Layout& layout, std::chrono::milliseconds heartbeat_timeout);

}  // namespace peregrine::dist
