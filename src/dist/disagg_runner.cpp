#include "dist/disagg_runner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "util/error.h"

namespace peregrine::dist {
namespace {

constexpr const char* kDamagedTransfer =
    "the K/V of its prompt did not reach the decode pool intact (checksum mismatch); the request ends here";

// KV heads [first, second) of tensor-parallel rank r of a pool of t ranks.
std::pair<int64_t, int64_t> pool_heads(const ModelConfig& c, int r, int t) {
  const SliceShape s = resolve_slice(c, {0, -1, r, t});
  return {s.kv_head_begin, s.kv_head_end};
}

// The heads prefill rank i sends: those it holds that no lower prefill rank holds (with fewer KV
// heads than ranks, neighbours hold the same one).
std::pair<int64_t, int64_t> sent_heads(const ModelConfig& c, int i, int prefill) {
  auto [a, b] = pool_heads(c, i, prefill);
  if (i > 0) a = std::max(a, pool_heads(c, i - 1, prefill).second);
  return {a, b};
}

// The heads prefill rank i sends decode rank j (empty: first >= second).
std::pair<int64_t, int64_t> part_heads(const ModelConfig& c, const Layout& l, int i, int j) {
  const auto [a, b] = sent_heads(c, i, l.prefill_ranks);
  const auto [lo, hi] = pool_heads(c, j, l.decode_ranks);
  return {std::max(a, lo), std::min(b, hi)};
}

// Prefill rank i (world rank i): its part of a prompt's K/V to every decode rank that holds any
// of its heads, as [u64 checksum][blocks][heads' bytes]. Returns the bytes sent.
int64_t send_parts(Shard& shard, const Layout& l, const KvCache& kv, const KvTransferSpec& t, bool damage,
                   std::vector<std::byte>& buf) {
  const ModelConfig& c = shard.model().config();
  const int i = shard.place().tp_rank;
  const int64_t mine = shard.model().shape().kv_head_begin;
  int64_t sent = 0;
  for (int j = 0; j < l.decode_ranks; ++j) {
    const auto [lo, hi] = part_heads(c, l, i, j);
    if (lo >= hi) continue;
    const size_t per = kv.heads_bytes(lo - mine, hi - mine);
    buf.resize(sizeof(uint64_t) + t.blocks.size() * per);
    const std::span<std::byte> body = std::span<std::byte>(buf).subspan(sizeof(uint64_t));
    for (size_t k = 0; k < t.blocks.size(); ++k) kv.export_heads(t.blocks[k], lo - mine, hi - mine, body.subspan(k * per, per));
    const uint64_t sum = checksum_bytes(body) + (damage ? 1 : 0);
    std::memcpy(buf.data(), &sum, sizeof(sum));
    shard.world().send(buf, l.prefill_ranks + j, kTagKv);
    sent += static_cast<int64_t>(buf.size());
  }
  return sent;
}

// Decode rank j (world rank P + j): the parts of a prompt's K/V from the prefill ranks, stored
// under the same block ids. False if a part arrived damaged (the rest is still received, so the
// next messages line up).
bool receive_parts(Shard& shard, const Layout& l, KvCache& kv, const KvTransferSpec& t, std::vector<std::byte>& buf) {
  const ModelConfig& c = shard.model().config();
  const int j = shard.place().tp_rank;
  const int64_t mine = shard.model().shape().kv_head_begin;
  bool intact = true;
  for (int i = 0; i < l.prefill_ranks; ++i) {
    const auto [lo, hi] = part_heads(c, l, i, j);
    if (lo >= hi) continue;
    const size_t per = kv.heads_bytes(lo - mine, hi - mine);
    buf.resize(sizeof(uint64_t) + t.blocks.size() * per);
    shard.world().recv(buf, i, kTagKv);
    const std::span<const std::byte> body = std::span<const std::byte>(buf).subspan(sizeof(uint64_t));
    uint64_t sum = 0;
    std::memcpy(&sum, buf.data(), sizeof(sum));
    if (checksum_bytes(body) != sum) {
      intact = false;
      continue;
    }
    for (size_t k = 0; k < t.blocks.size(); ++k) kv.import_heads(t.blocks[k], lo - mine, hi - mine, body.subspan(k * per, per));
  }
  return intact;
}

size_t logit_rows(const Batch& b) {
  return static_cast<size_t>(std::count_if(b.want_logits.begin(), b.want_logits.end(), [](uint8_t w) { return w != 0; }));
}

}  // namespace

DisaggRunner::DisaggRunner(Shard& shard, const Layout& layout)
    : DistRunner(shard.world()), shard_(shard), layout_(layout) {
  if (!layout.disaggregated() || world_.size() != layout.ranks()) {
    throw UsageError("disaggregated runner: the world does not match " + layout.describe());
  }
  // A fault for the tests: the n-th transfer is sent with a wrong checksum, as if damaged on the way.
  if (const char* n = std::getenv("PEREGRINE_TEST_DAMAGE_KV_TRANSFER")) damage_transfer_ = std::atoll(n);
}

DisaggRunner::~DisaggRunner() {
  try {
    shutdown();
  } catch (const std::exception&) {
    // Already reported; the job ends anyway.
  }
}

int64_t DisaggRunner::local_kv_length(SeqId seq, int64_t n_computed) const {
  const auto it = local_.find(seq);
  return it == local_.end() ? n_computed : std::min(n_computed, it->second);
}

std::vector<std::pair<SeqId, std::string>> DisaggRunner::take_failed_sequences() { return std::exchange(failed_, {}); }

void DisaggRunner::forget_released() {
  for (; journal_seen_ < journal_.size(); ++journal_seen_) {
    const KvOp& op = journal_[journal_seen_];
    if (op.kind == KvOpKind::ReleaseSeq) {
      resident_.erase(op.seq);
      local_.erase(op.seq);
    } else if (op.kind == KvOpKind::Truncate) {
      if (auto it = resident_.find(op.seq); it != resident_.end()) it->second = std::min(it->second, op.n);
      if (auto it = local_.find(op.seq); it != local_.end()) it->second = std::min(it->second, op.n);
    }
  }
}

// A sequence's only row, at the position where its K/V in the decode pool ends, is a decode row.
void DisaggRunner::split(const Batch& batch) {
  prompt_.clear();
  decode_.clear();
  row_is_decode_.clear();
  std::map<SeqId, int> rows;
  for (SeqId s : batch.seq_ids) ++rows[s];
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqId s = batch.seq_ids[i];
    const auto it = resident_.find(s);
    const bool decode = rows[s] == 1 && it != resident_.end() && it->second == batch.positions[i];
    (decode ? decode_ : prompt_).add(batch.tokens[i], batch.positions[i], s, batch.want_logits[i] != 0);
    if (batch.want_logits[i]) row_is_decode_.push_back(decode ? 1 : 0);
  }
}

// Each decode rank's damaged sequences ([u64 n][n SeqId]), then its vocabulary slice of the
// decode rows' logits, put together as [rows][n_vocab].
void DisaggRunner::receive_decode_results() {
  const ModelConfig& c = config();
  const int prefill = layout_.prefill_ranks, decode = layout_.decode_ranks;
  const size_t rows = logit_rows(decode_), n_vocab = static_cast<size_t>(c.n_vocab);
  decode_logits_.resize(rows * n_vocab);
  try {
    for (int j = 0; j < decode; ++j) {
      world_.recv_message(status_, prefill + j, kTagStatus);
      uint64_t n = 0;
      if (status_.size() >= sizeof(n)) std::memcpy(&n, status_.data(), sizeof(n));
      if (status_.size() != sizeof(n) + n * sizeof(SeqId) || n > decode_.size()) {
        throw CommError("decode rank " + std::to_string(prefill + j) + " answered with " +
                        std::to_string(status_.size()) + " status bytes");
      }
      for (uint64_t k = 0; k < n; ++k) {
        SeqId s = 0;
        std::memcpy(&s, status_.data() + sizeof(n) + k * sizeof(SeqId), sizeof(SeqId));
        if (std::none_of(failed_.begin(), failed_.end(), [&](const auto& f) { return f.first == s; })) {
          failed_.emplace_back(s, kDamagedTransfer);
        }
      }
    }
    for (int j = 0; j < decode; ++j) {
      const SliceShape s = resolve_slice(c, {0, -1, j, decode});
      const auto width = static_cast<size_t>(s.vocab());
      part_.resize(rows * width);
      world_.recv_values(std::span<float>(part_), prefill + j, kTagLogits);
      for (size_t r = 0; r < rows; ++r) {
        std::copy_n(part_.data() + r * width, width, decode_logits_.data() + r * n_vocab + s.vocab_begin);
      }
    }
  } catch (const CommError& e) {
    fail(e);
  }
}

void DisaggRunner::transfer(SeqId seq, int64_t length, KvCache& kv) {
  const BlockTable* table = kv.block_table(seq);
  const int64_t n = (length + kv.block_size() - 1) / kv.block_size();
  if (!table || table->size() < n) throw UsageError("disaggregated runner: no blocks for a finished prompt");
  // Every block ships (releases_windowed_blocks() is false, so none was given back); checked before
  // any message goes out, so a broken promise is an error here rather than a half-sent transfer.
  const auto shipped = table->blocks().first(static_cast<size_t>(n));
  if (std::find(shipped.begin(), shipped.end(), kNoBlock) != shipped.end()) {
    throw UsageError("disaggregated runner: a finished prompt's block was given back (sliding window)");
  }
  ++transfers_;
  message_.kind = StepKind::KvTransfer;
  message_.transfer.seq = seq;
  message_.transfer.length = length;
  message_.transfer.blocks.assign(table->blocks().begin(), table->blocks().begin() + n);
  const KvTransferSpec spec = message_.transfer;
  send_with_journal();
  journal_seen_ = 0;
  try {
    transfer_bytes_ += send_parts(shard_, layout_, kv, spec, transfers_ == damage_transfer_, part_bytes_);
  } catch (const CommError& e) {
    fail(e);
  }
  resident_[seq] = length;
  local_[seq] = length;
}

void DisaggRunner::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  forget_released();
  split(batch);
  // Both pools get the step at once: the decode pool decodes while the prefill pool runs the prompts.
  message_.kind = StepKind::Forward;
  message_.batch = prompt_;
  message_.decode = decode_;
  send_with_journal();
  journal_seen_ = 0;
  try {
    if (prompt_.size() > 0) {
      shard_.run_stage(prompt_, kv);
      shard_.gather_logits(static_cast<int64_t>(logit_rows(prompt_)), prompt_logits_);
    }
  } catch (const CommError& e) {
    fail(e);
  }
  for (size_t i = 0; i < decode_.size(); ++i) {
    const int64_t end = decode_.positions[i] + 1;
    kv.set_seq_length(decode_.seq_ids[i], end);  // the mirrors' digests include lengths
    resident_[decode_.seq_ids[i]] = end;
  }
  if (decode_.size() > 0) receive_decode_results();
  const size_t n_vocab = static_cast<size_t>(config().n_vocab);
  logits.resize(row_is_decode_.size() * n_vocab);
  size_t from_prompt = 0, from_decode = 0;
  for (size_t r = 0; r < row_is_decode_.size(); ++r) {
    const float* src = row_is_decode_[r] ? decode_logits_.data() + from_decode++ * n_vocab
                                         : prompt_logits_.data() + from_prompt++ * n_vocab;
    std::copy_n(src, n_vocab, logits.data() + r * n_vocab);
  }
  // The prompts this step completed (their last row wants logits) move to the decode pool.
  std::map<SeqId, int64_t> completed;
  for (size_t i = 0; i < prompt_.size(); ++i) {
    if (prompt_.want_logits[i])
      completed[prompt_.seq_ids[i]] = std::max<int64_t>(completed[prompt_.seq_ids[i]], prompt_.positions[i] + 1);
  }
  for (const auto& [seq, length] : completed) transfer(seq, length, kv);
}

namespace {

// A disaggregated worker: in the prefill pool it runs the prompt rows and sends its parts of each
// transfer; in the decode pool it runs the decode rows, answers with the damaged sequences among
// them, and stores the transfers' parts.
class DisaggWorker final : public WorkerRole {
 public:
  DisaggWorker(Shard& s, const Layout& l) : shard_(s), layout_(l), decoding_(s.world().rank() >= l.prefill_ranks) {}

  void applied(const KvOp& op) override {
    if (op.kind == KvOpKind::ReleaseSeq) damaged_.erase(op.seq);
  }
  void bound() override { damaged_.clear(); }

  void forward(const StepMessage& m, KvCache& kv) override {
    if (!decoding_) {
      if (m.batch.size() > 0) shard_.run_stage(m.batch, kv);
      return;
    }
    if (m.decode.size() == 0) return;
    shard_.run_stage(m.decode, kv);  // its logits slice goes to rank 0 in the background
    std::vector<SeqId> failed;
    for (SeqId s : m.decode.seq_ids) {
      if (damaged_.count(s) && std::find(failed.begin(), failed.end(), s) == failed.end()) failed.push_back(s);
    }
    const uint64_t n = failed.size();
    status_.resize(sizeof(n) + n * sizeof(SeqId));
    std::memcpy(status_.data(), &n, sizeof(n));
    if (n) std::memcpy(status_.data() + sizeof(n), failed.data(), n * sizeof(SeqId));
    shard_.world().send(status_, 0, kTagStatus);
  }

  void transfer(const KvTransferSpec& t, KvCache& kv) override {
    if (!decoding_) {
      send_parts(shard_, layout_, kv, t, false, bytes_);
    } else if (receive_parts(shard_, layout_, kv, t, bytes_)) {
      damaged_.erase(t.seq);
    } else {
      damaged_.insert(t.seq);
    }
  }

 private:
  Shard& shard_;
  const Layout& layout_;
  const bool decoding_;      // in the decode pool
  std::set<SeqId> damaged_;  // decode pool: sequences whose last transfer failed its checksum
  std::vector<std::byte> bytes_, status_;
};

}  // namespace

void run_disagg_worker(Shard& shard, const Layout& layout, std::chrono::milliseconds heartbeat_timeout) {
  DisaggWorker role(shard, layout);
  serve_worker(shard, role, heartbeat_timeout);
}

}  // namespace peregrine::dist
