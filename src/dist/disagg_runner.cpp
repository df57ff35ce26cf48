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

// KV heads [first, second) of tensor-parallel rank r of a pool of t ranks (ep: experts spread).
std::pair<int64_t, int64_t> pool_heads(const ModelConfig& c, int r, int t, bool ep) {
  const SliceShape s = resolve_slice(c, {0, -1, r, t, ep});
  return {s.kv_head_begin, s.kv_head_end};
}

// The heads prefill rank i sends: those it holds that no lower prefill rank holds (with fewer KV
// heads than ranks, neighbours hold the same one).
std::pair<int64_t, int64_t> sent_heads(const ModelConfig& c, int i, int prefill, bool ep) {
  auto [a, b] = pool_heads(c, i, prefill, ep);
  if (i > 0) a = std::max(a, pool_heads(c, i - 1, prefill, ep).second);
  return {a, b};
}

// The heads prefill rank i sends decode rank j (empty: first >= second).
std::pair<int64_t, int64_t> part_heads(const ModelConfig& c, const Layout& l, int i, int j) {
  const auto [a, b] = sent_heads(c, i, l.prefill_ranks, l.ep);
  const auto [lo, hi] = pool_heads(c, j, l.decode_ranks, l.ep);
  return {std::max(a, lo), std::min(b, hi)};
}

// Prefill rank i (world rank D + i): its part of a prompt's K/V to every decode rank (world rank
// j) that holds any of its heads, as [u64 checksum][blocks][heads' bytes]. Returns the bytes sent.
int64_t send_parts(Shard& shard, const Layout& l, KvCache& kv, const KvTransferSpec& t, bool damage,
                   std::vector<std::byte>& buf) {
  const ModelConfig& c = shard.model().config();
  ExecutionContext& ctx = shard.model().context();
  apply_block_copies(ctx, kv);  // the blocks' K/V as copy-on-write left them
  const int i = shard.place().tp_rank;
  const int64_t mine = shard.model().shape().kv_head_begin;
  int64_t sent = 0;
  for (int j = 0; j < l.decode_ranks; ++j) {
    const auto [lo, hi] = part_heads(c, l, i, j);
    if (lo >= hi) continue;
    const size_t per = kv.storage().heads_bytes(lo - mine, hi - mine);
    buf.resize(sizeof(uint64_t) + t.blocks.size() * per);
    const std::span<std::byte> body = std::span<std::byte>(buf).subspan(sizeof(uint64_t));
    for (size_t k = 0; k < t.blocks.size(); ++k) {
      ctx.export_kv(kv.storage(), t.blocks[k], lo - mine, hi - mine, body.subspan(k * per, per));
    }
    const uint64_t sum = checksum_bytes(body) + (damage ? 1 : 0);
    std::memcpy(buf.data(), &sum, sizeof(sum));
    shard.world().send(buf, j, kTagKv);
    sent += static_cast<int64_t>(buf.size());
  }
  return sent;
}

// Decode rank j (world rank j): the parts of a prompt's K/V from the prefill ranks, stored under
// the same block ids. `intact` turns false if a part arrived damaged (the rest is still received,
// so the next messages line up). Returns the bytes received.
int64_t receive_parts(Shard& shard, const Layout& l, KvCache& kv, const KvTransferSpec& t, std::vector<std::byte>& buf,
                      bool& intact) {
  const ModelConfig& c = shard.model().config();
  ExecutionContext& ctx = shard.model().context();
  apply_block_copies(ctx, kv);  // pending copies land before the imports, which overwrite them
  const int j = shard.place().tp_rank;
  const int64_t mine = shard.model().shape().kv_head_begin;
  int64_t received = 0;
  intact = true;
  for (int i = 0; i < l.prefill_ranks; ++i) {
    const auto [lo, hi] = part_heads(c, l, i, j);
    if (lo >= hi) continue;
    const size_t per = kv.storage().heads_bytes(lo - mine, hi - mine);
    buf.resize(sizeof(uint64_t) + t.blocks.size() * per);
    shard.world().recv(buf, l.prefill_rank(i), kTagKv);
    received += static_cast<int64_t>(buf.size());
    const std::span<const std::byte> body = std::span<const std::byte>(buf).subspan(sizeof(uint64_t));
    uint64_t sum = 0;
    std::memcpy(&sum, buf.data(), sizeof(sum));
    if (checksum_bytes(body) != sum) {
      intact = false;
      continue;
    }
    for (size_t k = 0; k < t.blocks.size(); ++k) {
      ctx.import_kv(kv.storage(), t.blocks[k], lo - mine, hi - mine, body.subspan(k * per, per));
    }
  }
  return received;
}

size_t logit_rows(const Batch& b) {
  return static_cast<size_t>(std::count_if(b.want_logits.begin(), b.want_logits.end(), [](uint8_t w) { return w != 0; }));
}

// A decode rank's status after a decode step: [u64 n][n SeqId], the sequences whose K/V arrived
// damaged there.
void encode_damaged(const std::vector<SeqId>& seqs, std::vector<std::byte>& out) {
  const uint64_t n = seqs.size();
  out.resize(sizeof(n) + n * sizeof(SeqId));
  std::memcpy(out.data(), &n, sizeof(n));
  if (n) std::memcpy(out.data() + sizeof(n), seqs.data(), n * sizeof(SeqId));
}

}  // namespace

DisaggRunner::DisaggRunner(Shard& shard, const Layout& layout)
    : DistRunner(shard.world()), shard_(shard), layout_(layout) {
  if (!layout.disaggregated() || world_.size() != layout.ranks()) {
    throw UsageError("disaggregated runner: the world does not match " + layout.describe());
  }
}

DisaggRunner::~DisaggRunner() {
  try {
    shutdown();
  } catch (const std::exception&) {
    // Already reported; the job ends anyway.
  }
}


void DisaggRunner::forget_released(const KvJournal& journal) {
  for (; journal_seen_ < journal.size(); ++journal_seen_) {
    const KvOp& op = journal[journal_seen_];
    if (op.kind == KvOpKind::ReleaseSeq) {
      resident_.erase(op.seq);
      damaged_.erase(op.seq);
    } else if (op.kind == KvOpKind::Truncate) {
      if (auto it = resident_.find(op.seq); it != resident_.end()) it->second = std::min(it->second, op.n);
    }
  }
}

// The journal is about to go out (and start again): what it released leaves the decode pool.
void DisaggRunner::observe_journal(const KvJournal& journal) {
  forget_released(journal);
  journal_seen_ = 0;
}

// A sequence's only row, at the position where its K/V in the decode pool ends, is a decode row.
void DisaggRunner::split(const Batch& batch) {
  forget_released(journal_);
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

// The prefill pool gets prompt_ (every rank gets the message: the others apply its journal).
void DisaggRunner::start_prompts(KvCache& kv) {
  if (step_.in_flight || step_.finished) throw UsageError("disaggregated runner: a prompt step is already in flight");
  message_.kind = StepKind::Forward;
  message_.batch = prompt_;
  message_.decode.clear();
  send_with_journal();
  step_.in_flight = true;
  step_.rows = static_cast<int64_t>(logit_rows(prompt_));
  step_.completed.clear();
  for (size_t i = 0; i < prompt_.size(); ++i) {
    const SeqId s = prompt_.seq_ids[i];
    const int64_t end = prompt_.positions[i] + 1;
    if (prompt_.want_logits[i]) step_.completed[s] = std::max(step_.completed[s], end);
  }
  step_.kv = &kv;
  step_.start = std::chrono::steady_clock::now();
}

// The engine sends only prompt rows this way (a recomputation included: its K/V goes over again).
void DisaggRunner::submit_prefill(const Batch& batch, KvCache& kv) {
  forget_released(journal_);
  prompt_ = batch;
  start_prompts(kv);
}

bool DisaggRunner::prefill_done() {
  if (!step_.in_flight) return true;
  try {
    for (int i = 0; i < layout_.prefill_ranks; ++i) {
      if (world_.probe(layout_.prefill_rank(i), kTagLogits)) continue;
      throw_if_stop_requested();
      if (std::chrono::steady_clock::now() - step_.start > world_.timeout()) {
        throw CommError("prefill rank " + std::to_string(layout_.prefill_rank(i)) +
                        " did not finish a prompt step within " + std::to_string(world_.timeout().count() / 1000) +
                        " s: dead or hung");
      }
      return false;
    }
  } catch (const CommError& e) {
    fail(e);
  }
  return true;
}

StepResult DisaggRunner::collect_prefill() {
  if (!step_.in_flight && !step_.finished) throw UsageError("disaggregated runner: no prompt step to collect");
  try {
    if (step_.in_flight) finish_prompts();
  } catch (...) {
    step_.finished = false;  // collected, with an error the engine reports for its requests
    throw;
  }
  step_.finished = false;
  return {step_.logits, {}, {}};
}

void DisaggRunner::settle() {
  if (step_.in_flight) finish_prompts();
}

// The prompt step's logits from the prefill ranks' vocabulary slices, put together as
// [rows][n_vocab]; then the K/V of the prompts it completed, moved to the decode pool.
void DisaggRunner::finish_prompts() {
  const ModelConfig& c = config();
  const auto rows = static_cast<size_t>(step_.rows), n_vocab = static_cast<size_t>(c.n_vocab);
  step_.logits.resize(rows * n_vocab);
  try {
    for (int i = 0; i < layout_.prefill_ranks; ++i) {
      const SliceShape s = resolve_slice(c, {0, -1, i, layout_.prefill_ranks, layout_.ep});
      const auto width = static_cast<size_t>(s.vocab());
      part_.resize(rows * width);
      world_.recv_values(std::span<float>(part_), layout_.prefill_rank(i), kTagLogits);
      for (size_t r = 0; r < rows; ++r) {
        std::copy_n(part_.data() + r * width, width, step_.logits.data() + r * n_vocab + s.vocab_begin);
      }
    }
  } catch (const CommError& e) {
    fail(e);
  }
  step_.in_flight = false;
  step_.finished = true;
  KvCache& kv = *step_.kv;
  for (const auto& [seq, length] : step_.completed) transfer(seq, length, kv);
}

// The decode rows on the decode pool: rank 0 computes its share beside the other decode ranks.
void DisaggRunner::run_decode(KvCache& kv, std::vector<float>& logits) {
  message_.kind = StepKind::Forward;
  message_.batch.clear();
  message_.decode = decode_;
  send_with_journal();
  try {
    shard_.run_stage(decode_, kv);
    for (size_t i = 0; i < decode_.size(); ++i) resident_[decode_.seq_ids[i]] = decode_.positions[i] + 1;
    receive_damaged();
    shard_.gather_logits(static_cast<int64_t>(logit_rows(decode_)), logits);
  } catch (const CommError& e) {
    fail(e);
  }
}

// The sequences among the decode rows whose K/V reached a decode rank damaged (this one's, and each
// other decode rank's answer) fail this step.
void DisaggRunner::receive_damaged() {
  auto flag = [&](SeqId s) {
    if (std::none_of(failed_.begin(), failed_.end(), [&](const auto& f) { return f.first == s; })) {
      failed_.emplace_back(s, kDamagedTransfer);
    }
  };
  for (SeqId s : decode_.seq_ids) {
    if (damaged_.count(s)) flag(s);
  }
  for (int j = 1; j < layout_.decode_ranks; ++j) {
    world_.recv_message(status_, j, kTagStatus);
    uint64_t n = 0;
    if (status_.size() >= sizeof(n)) std::memcpy(&n, status_.data(), sizeof(n));
    if (status_.size() != sizeof(n) + n * sizeof(SeqId) || n > decode_.size()) {
      throw CommError("decode rank " + std::to_string(j) + " answered with " + std::to_string(status_.size()) +
                      " status bytes");
    }
    for (uint64_t k = 0; k < n; ++k) {
      SeqId s = 0;
      std::memcpy(&s, status_.data() + sizeof(n) + k * sizeof(SeqId), sizeof(SeqId));
      flag(s);
    }
  }
}

void DisaggRunner::transfer(SeqId seq, int64_t length, KvCache& kv) {
  const BlockTable* table = kv.pool().block_table(seq);
  const int64_t n = (length + kv.pool().block_size() - 1) / kv.pool().block_size();
  if (!table || table->size() < n) throw UsageError("disaggregated runner: no blocks for a finished prompt");
  // Every block ships (a runner with a prefill lane gets no block given back); checked before
  // any message goes out, so a broken promise is an error here rather than a half-sent transfer.
  const auto shipped = table->blocks().first(static_cast<size_t>(n));
  if (std::find(shipped.begin(), shipped.end(), kNoBlock) != shipped.end()) {
    throw UsageError("disaggregated runner: a finished prompt's block was given back (sliding window)");
  }
  ++transfers_;
  message_.kind = StepKind::KvTransfer;
  message_.transfer.seq = seq;
  message_.transfer.length = length;
  message_.transfer.blocks.assign(shipped.begin(), shipped.end());
  const KvTransferSpec spec = message_.transfer;
  send_with_journal();
  bool intact = true;
  try {
    transfer_bytes_ += receive_parts(shard_, layout_, kv, spec, part_bytes_, intact);
  } catch (const CommError& e) {
    fail(e);
  }
  if (intact) {
    damaged_.erase(seq);
  } else {
    damaged_.insert(seq);
  }
  resident_[seq] = length;
}

void DisaggRunner::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  failed_.clear();
  split(batch);
  // Both pools at once: the prompts start in the prefill pool while the decode pool decodes.
  const bool prompts = prompt_.size() > 0;
  if (prompts) start_prompts(kv);
  if (decode_.size() > 0) run_decode(kv, decode_logits_);
  if (prompts) {
    try {
      finish_prompts();
    } catch (...) {
      step_.finished = false;
      throw;
    }
  }
  const size_t n_vocab = static_cast<size_t>(config().n_vocab);
  logits.resize(row_is_decode_.size() * n_vocab);
  size_t from_prompt = 0, from_decode = 0;
  for (size_t r = 0; r < row_is_decode_.size(); ++r) {
    const float* src = row_is_decode_[r] ? decode_logits_.data() + from_decode++ * n_vocab
                                         : step_.logits.data() + from_prompt++ * n_vocab;
    std::copy_n(src, n_vocab, logits.data() + r * n_vocab);
  }
  if (prompts) step_.finished = false;  // collected here
}

namespace {

// A disaggregated worker: in the decode pool it runs the decode rows, answers with the damaged
// sequences among them, and stores the transfers' parts; in the prefill pool it runs the prompt
// rows and sends its parts of each transfer.
class DisaggWorker final : public WorkerRole {
 public:
  DisaggWorker(Shard& s, const Layout& l) : shard_(s), layout_(l), decoding_(l.in_decode_pool(s.world().rank())) {
    // A fault for the tests: the n-th transfer is sent with a wrong checksum, as if damaged on the way.
    if (const char* n = std::getenv("PEREGRINE_TEST_DAMAGE_KV_TRANSFER"); n && !decoding_)
      damage_transfer_ = std::atoll(n);
  }

  void applied(const KvOp& op) override {
    if (op.kind == KvOpKind::ReleaseSeq) damaged_.erase(op.seq);
  }
  void bound() override { damaged_.clear(); }

  void forward(const StepMessage& m, KvCache& kv) override {
    if (!decoding_) {
      if (m.batch.size() > 0) shard_.run_stage(m.batch, kv);  // its logits slice goes to rank 0 in the background
      return;
    }
    if (m.decode.size() == 0) return;
    shard_.run_stage(m.decode, kv);
    std::vector<SeqId> failed;
    for (SeqId s : m.decode.seq_ids) {
      if (damaged_.count(s) && std::find(failed.begin(), failed.end(), s) == failed.end()) failed.push_back(s);
    }
    encode_damaged(failed, status_);
    shard_.world().send(status_, 0, kTagStatus);
  }

  void transfer(const KvTransferSpec& t, KvCache& kv) override {
    if (!decoding_) {
      send_parts(shard_, layout_, kv, t, ++transfers_ == damage_transfer_, bytes_);
      return;
    }
    bool intact = true;
    receive_parts(shard_, layout_, kv, t, bytes_, intact);
    if (intact) {
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
  int64_t transfers_ = 0, damage_transfer_ = 0;
};

}  // namespace

void run_disagg_worker(Shard& shard, const Layout& layout, std::chrono::milliseconds heartbeat_timeout) {
  DisaggWorker role(shard, layout);
  serve_worker(shard, role, heartbeat_timeout);
}

}  // namespace peregrine::dist
