#pragma once
// Disaggregated prefill and decode over two processes (--disaggregate 1:1). World rank 0 is the
// prefill pool: it holds the whole model, runs the engine (scheduler, prefix cache, sampling) and
// computes every prompt chunk. World rank 1 is the decode pool: it holds the whole model too and
// computes every decode row. Both caches have the same blocks: rank 1 applies rank 0's KV journal,
// so a block id means the same on both.
//
// One step, as rank 0 runs it:
//   1. rows are split: a sequence's single row at the position its K/V on rank 1 ends at is a
//      decode row; every other row is a prompt row;
//   2. rank 0 sends rank 1 the decode rows (with the journal), and computes the prompt rows itself
//      meanwhile;
//   3. rank 1 answers with the decode rows' logits (and the sequences whose K/V arrived damaged);
//   4. for each prompt this step completed, rank 0 sends its blocks' K/V (every layer, with a
//      checksum) to rank 1, which stores them under the same block ids before its first decode.
// A sequence whose transfer arrived damaged ends with an error at its first decode step (never
// lost, never decoded from bad K/V); the others go on. A preempted sequence is prefilled again on
// rank 0 and sent again. Prefix caching stays on rank 0 over the prompt blocks it computed
// (local_kv_length); blocks written by decode steps are never offered as a prefix.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dist/dist_runner.h"
#include "model/model.h"

namespace peregrine::dist {

class DisaggRunner final : public DistRunner {
 public:
  DisaggRunner(Model& model, Communicator& world);
  ~DisaggRunner() override;

  const ModelConfig& config() const override { return model_.config(); }
  KvShape kv_shape() const override { return model_.kv_shape(); }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override;
  std::span<const float> logits_hidden() const override { return {}; }
  int64_t local_kv_length(SeqId seq, int64_t n_computed) const override;
  bool releases_windowed_blocks() const override { return false; }  // transfer() ships every prompt block
  std::vector<std::pair<SeqId, std::string>> take_failed_sequences() override;

  // Transfers sent, and their bytes, since the start (for the performance figures).
  int64_t transfers() const { return transfers_; }
  int64_t transfer_bytes() const { return transfer_bytes_; }

 private:
  void forget_released();  // the journal's released / truncated sequences leave the decode pool
  void split(const Batch& batch);
  void send_decode_rows();
  void receive_decode_logits();
  void transfer(SeqId seq, int64_t length, KvCache& kv);

  Model& model_;
  std::map<SeqId, int64_t> resident_;  // sequences whose K/V is on rank 1: positions [0, n) there
  std::map<SeqId, int64_t> local_;     // positions [0, n) of the sequence computed here
  size_t journal_seen_ = 0;            // journal entries forget_released() has looked at
  Batch prompt_, decode_;
  std::vector<uint8_t> row_is_decode_;  // per logits row of the step, in batch order
  std::vector<float> prompt_logits_, decode_logits_;
  std::vector<std::byte> reply_, blocks_;
  std::vector<std::pair<SeqId, std::string>> failed_;
  int64_t transfers_ = 0, transfer_bytes_ = 0;
  int64_t damage_transfer_ = 0;  // PEREGRINE_TEST_DAMAGE_KV_TRANSFER: the n-th transfer's checksum is wrong
};

// The decode rank's life: mirror rank 0's blocks, store the K/V transfers, run the decode rows and
// answer with their logits, until Shutdown.
void run_decode_worker(Model& model, Communicator& world, std::chrono::milliseconds heartbeat_timeout);

}  // namespace peregrine::dist
