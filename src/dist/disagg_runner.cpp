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
    "the K/V of its prompt did not reach the decode rank intact (checksum mismatch); the request ends here";

}  // namespace

DisaggRunner::DisaggRunner(Model& model, Communicator& world) : DistRunner(world), model_(model) {
  if (world.size() != 2) throw UsageError("disaggregated runner: one prefill and one decode rank");
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

// A sequence's only row, at the position where its K/V on the decode rank ends, is a decode row.
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

void DisaggRunner::send_decode_rows() {
  message_.kind = StepKind::Forward;
  message_.batch = decode_;
  send_with_journal();
  journal_seen_ = 0;
}

// Rank 1's answer: [u64 n][n SeqId: damaged sequences of these rows][rows][n_vocab] floats.
void DisaggRunner::receive_decode_logits() {
  try {
    world_.recv_message(reply_, 1, kTagLogits);
  } catch (const CommError& e) {
    fail(e);
  }
  uint64_t n_failed = 0;
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  const size_t want = decode_.size() * n_vocab * sizeof(float);
  if (reply_.size() >= sizeof(n_failed)) std::memcpy(&n_failed, reply_.data(), sizeof(n_failed));
  const size_t head = sizeof(n_failed) + n_failed * sizeof(SeqId);
  if (n_failed > decode_.size() || reply_.size() != head + want) {
    fail(CommError("the decode rank's answer has " + std::to_string(reply_.size()) + " bytes, expected " +
                   std::to_string(head + want)));
  }
  for (uint64_t i = 0; i < n_failed; ++i) {
    SeqId s = 0;
    std::memcpy(&s, reply_.data() + sizeof(n_failed) + i * sizeof(SeqId), sizeof(SeqId));
    failed_.emplace_back(s, kDamagedTransfer);
  }
  decode_logits_.resize(decode_.size() * n_vocab);
  std::memcpy(decode_logits_.data(), reply_.data() + head, want);
}

void DisaggRunner::transfer(SeqId seq, int64_t length, KvCache& kv) {
  const BlockTable* table = kv.block_table(seq);
  const int64_t n = (length + kv.block_size() - 1) / kv.block_size();
  if (!table || table->size() < n) throw UsageError("disaggregated runner: no blocks for a finished prompt");
  const size_t per_block = kv.block_bytes();
  blocks_.resize(static_cast<size_t>(n) * per_block);
  message_.transfer.blocks.assign(table->blocks().begin(), table->blocks().begin() + n);
  for (int64_t i = 0; i < n; ++i) {
    kv.export_block((*table)[i], std::span<std::byte>(blocks_).subspan(static_cast<size_t>(i) * per_block, per_block));
  }
  ++transfers_;
  transfer_bytes_ += static_cast<int64_t>(blocks_.size());
  message_.kind = StepKind::KvTransfer;
  message_.transfer.seq = seq;
  message_.transfer.length = length;
  message_.transfer.checksum = checksum_bytes(blocks_) + (transfers_ == damage_transfer_ ? 1 : 0);
  send_with_journal();
  journal_seen_ = 0;
  try {
    world_.send(blocks_, 1, kTagKv);
  } catch (const CommError& e) {
    fail(e);
  }
  resident_[seq] = length;
  local_[seq] = length;
}

void DisaggRunner::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  forget_released();
  split(batch);
  const bool remote = decode_.size() > 0;
  if (remote) send_decode_rows();  // rank 1 decodes while this rank runs the prompts
  if (prompt_.size() > 0) model_.forward(prompt_, kv, prompt_logits_);
  for (size_t i = 0; i < decode_.size(); ++i) {
    const int64_t end = decode_.positions[i] + 1;
    kv.set_seq_length(decode_.seq_ids[i], end);  // the mirrors' digests include lengths
    resident_[decode_.seq_ids[i]] = end;
  }
  if (remote) receive_decode_logits();
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  logits.resize(row_is_decode_.size() * n_vocab);
  size_t from_prompt = 0, from_decode = 0;
  for (size_t r = 0; r < row_is_decode_.size(); ++r) {
    const float* src = row_is_decode_[r] ? decode_logits_.data() + from_decode++ * n_vocab
                                         : prompt_logits_.data() + from_prompt++ * n_vocab;
    std::copy_n(src, n_vocab, logits.data() + r * n_vocab);
  }
  // The prompts this step completed (their last row wants logits) move to the decode rank.
  std::map<SeqId, int64_t> completed;
  for (size_t i = 0; i < prompt_.size(); ++i) {
    if (prompt_.want_logits[i])
      completed[prompt_.seq_ids[i]] = std::max<int64_t>(completed[prompt_.seq_ids[i]], prompt_.positions[i] + 1);
  }
  for (const auto& [seq, length] : completed) transfer(seq, length, kv);
}

namespace {

// The decode rank's state between messages.
struct DecodeWorker {
  DecodeWorker(Model& m, Communicator& w) : model(m), world(w) {}
  Model& model;
  Communicator& world;
  std::unique_ptr<KvCache> kv;
  std::set<SeqId> damaged;  // sequences whose last transfer failed its checksum
  std::vector<float> logits;
  std::vector<std::byte> bytes, reply;

  KvCache& cache() {
    if (!kv) throw UsageError("decode rank: a step arrived before any KV cache was bound");
    return *kv;
  }
  void apply(const KvJournal& journal) {
    for (const KvOp& op : journal) {
      cache().apply(op);
      if (op.kind == KvOpKind::ReleaseSeq) damaged.erase(op.seq);
    }
  }
  void decode(const Batch& batch) {
    if (batch.size() > 0) model.forward(batch, cache(), logits);
    std::vector<SeqId> failed;
    for (SeqId s : batch.seq_ids) {
      if (damaged.count(s) && std::find(failed.begin(), failed.end(), s) == failed.end()) failed.push_back(s);
    }
    const uint64_t n = failed.size();
    const size_t logit_bytes = batch.size() == 0 ? 0 : logits.size() * sizeof(float);
    reply.resize(sizeof(n) + n * sizeof(SeqId) + logit_bytes);
    std::memcpy(reply.data(), &n, sizeof(n));
    if (n) std::memcpy(reply.data() + sizeof(n), failed.data(), n * sizeof(SeqId));
    if (logit_bytes) std::memcpy(reply.data() + sizeof(n) + n * sizeof(SeqId), logits.data(), logit_bytes);
    world.send(reply, 0, kTagLogits);
  }
  void receive_blocks(const KvTransferSpec& t) {
    const size_t per_block = cache().block_bytes();
    bytes.resize(t.blocks.size() * per_block);
    world.recv(bytes, 0, kTagKv);
    if (checksum_bytes(bytes) != t.checksum) {
      damaged.insert(t.seq);
      return;
    }
    damaged.erase(t.seq);
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      cache().import_block(t.blocks[i], std::span<const std::byte>(bytes).subspan(i * per_block, per_block));
    }
  }
};

}  // namespace

void run_decode_worker(Model& model, Communicator& world, std::chrono::milliseconds heartbeat_timeout) {
  DecodeWorker w(model, world);
  StepMessage m;
  std::vector<std::byte> scratch;
  while (true) {
    receive_step(world, m, scratch, heartbeat_timeout);
    switch (m.kind) {
      case StepKind::Shutdown:
        return;
      case StepKind::Heartbeat:
        break;
      case StepKind::BindCache:
        w.kv.reset();
        w.damaged.clear();
        w.kv = std::make_unique<KvCache>(model.kv_shape(), m.cache.type, m.cache.n_blocks, m.cache.block_size);
        break;
      case StepKind::Forward:
        w.apply(m.journal);
        w.decode(m.batch);
        break;
      case StepKind::KvTransfer:
        w.apply(m.journal);
        w.receive_blocks(m.transfer);
        break;
      case StepKind::CheckMirror:
        w.apply(m.journal);
        send_digest(world, w.cache());
        break;
    }
  }
}

}  // namespace peregrine::dist
