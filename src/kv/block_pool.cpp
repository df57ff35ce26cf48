#include "kv/block_pool.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

int64_t blocks_for(int64_t n_tokens, int64_t block_size) { return (n_tokens + block_size - 1) / block_size; }

}  // namespace

BlockPool::BlockPool(int64_t n_blocks, int32_t block_size) : n_blocks_(n_blocks), block_size_(block_size) {
  if (n_blocks < 1 || n_blocks > std::numeric_limits<BlockId>::max()) {
    throw UsageError("KV cache: block count " + std::to_string(n_blocks) + " is out of range");
  }
  if (block_size < 1 || block_size > 65536) {
    throw UsageError("KV cache: block size " + std::to_string(block_size) + " is out of range [1, 65536]");
  }
  refs_.assign(static_cast<size_t>(n_blocks), 0);
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));
}

bool BlockPool::reserve(SeqId seq, int64_t n_tokens) {
  if (n_tokens < 0) throw UsageError("KV cache: negative token count " + std::to_string(n_tokens));
  auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : it->second.table.size();
  const int64_t need = blocks_for(n_tokens, block_size_);
  if (need - have > n_free_blocks()) return false;
  SeqState& s = it == seqs_.end() ? seqs_[seq] : it->second;
  for (int64_t i = have; i < need; ++i) {
    s.table.blocks_.push_back(take_free_block());
    record(KvOpKind::AppendNew, seq, s.table.blocks_.back());
  }
  return true;
}

BlockId BlockPool::take_free_block() {
  const BlockId b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::take_block(BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] != 0) {
    throw UsageError("KV cache mirror: block " + std::to_string(block) + " is not free here");
  }
  // The mirrored free list has the primary's order, so the block is normally at the back.
  const auto it = std::find(free_.rbegin(), free_.rend(), block);
  free_.erase(std::next(it).base());
  refs_[static_cast<size_t>(block)] = 1;
}

void BlockPool::release(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  record(KvOpKind::ReleaseSeq, seq);
  const auto& blocks = it->second.table.blocks_;
  // Released in reverse so a re-reserve gets the same blocks in the same order.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    if (*b != kNoBlock) drop_ref(*b);
  }
  seqs_.erase(it);
}

void BlockPool::truncate(SeqId seq, int64_t n_tokens) {
  if (n_tokens < 0) throw UsageError("KV cache: negative token count " + std::to_string(n_tokens));
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  record(KvOpKind::Truncate, seq, -1, n_tokens);
  SeqState& s = it->second;
  const int64_t keep = blocks_for(n_tokens, block_size_);
  while (s.table.size() > keep) {
    if (s.table.blocks_.back() != kNoBlock) drop_ref(s.table.blocks_.back());
    s.table.blocks_.pop_back();
  }
}

int64_t BlockPool::drop_blocks_before(SeqId seq, int64_t n_entries) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || n_entries <= 0) return 0;
  std::vector<BlockId>& blocks = it->second.table.blocks_;
  const auto end = static_cast<size_t>(std::min<int64_t>(n_entries, it->second.table.size()));
  int64_t dropped = 0;
  for (size_t i = 0; i < end; ++i) {
    if (blocks[i] == kNoBlock) continue;
    drop_ref(blocks[i]);
    blocks[i] = kNoBlock;
    ++dropped;
  }
  if (dropped > 0) record(KvOpKind::DropBefore, seq, -1, static_cast<int64_t>(end));
  return dropped;
}

const BlockTable* BlockPool::block_table(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second.table;
}

int64_t BlockPool::capacity(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.table.size() * block_size_;
}

void BlockPool::append_shared_block(SeqId seq, BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] < 1) {
    throw UsageError("KV cache: block " + std::to_string(block) + " is not in use and cannot be shared");
  }
  SeqState& s = seqs_[seq];
  ++refs_[static_cast<size_t>(block)];
  s.table.blocks_.push_back(block);
  record(KvOpKind::AppendShared, seq, block);
}

void BlockPool::retain_block(BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] < 1) {
    throw UsageError("KV cache: cannot retain free or unknown block " + std::to_string(block));
  }
  ++refs_[static_cast<size_t>(block)];
  record(KvOpKind::Retain, -1, block);
}

void BlockPool::release_block(BlockId block) {
  drop_ref(block);
  record(KvOpKind::Release, -1, block);
}

void BlockPool::drop_ref(BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] < 1) {
    throw UsageError("KV cache: cannot release free or unknown block " + std::to_string(block));
  }
  if (--refs_[static_cast<size_t>(block)] == 0) free_.push_back(block);
}

int32_t BlockPool::ref_count(BlockId block) const {
  if (block < 0 || block >= n_blocks_) throw UsageError("KV cache: block " + std::to_string(block) + " out of range");
  return refs_[static_cast<size_t>(block)];
}

bool BlockPool::make_writable(SeqId seq, int64_t pos) {
  auto it = seqs_.find(seq);
  if (pos < 0 || it == seqs_.end() || pos >= it->second.table.size() * block_size_) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " has no block for position " + std::to_string(pos));
  }
  BlockId& slot = it->second.table.blocks_[static_cast<size_t>(pos / block_size_)];
  if (slot == kNoBlock) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " gave back the block of position " +
                     std::to_string(pos) + " (out of its sliding window)");
  }
  if (refs_[static_cast<size_t>(slot)] <= 1) return true;
  if (free_.empty()) return false;
  const BlockId fresh = take_free_block();
  swap_in_copy(slot, fresh);
  record(KvOpKind::CopyOnWrite, seq, fresh, pos);
  return true;
}

// `slot` (a table entry holding a shared block) becomes the taken block `fresh`, which owes the
// shared block's K/V: the copy is recorded for the storage, the shared block loses a reference.
void BlockPool::swap_in_copy(BlockId& slot, BlockId fresh) {
  copies_.push_back({slot, fresh});
  drop_ref(slot);
  slot = fresh;
}

void BlockPool::apply(const KvOp& op) {
  auto known = [&]() -> SeqState& {
    auto it = seqs_.find(op.seq);
    if (it == seqs_.end()) throw UsageError("KV cache mirror: sequence " + std::to_string(op.seq) + " is unknown here");
    return it->second;
  };
  switch (op.kind) {
    case KvOpKind::AppendNew:
      take_block(op.block);
      seqs_[op.seq].table.blocks_.push_back(op.block);
      break;
    case KvOpKind::AppendShared:
      append_shared_block(op.seq, op.block);
      break;
    case KvOpKind::Retain:
      retain_block(op.block);
      break;
    case KvOpKind::Release:
      release_block(op.block);
      break;
    case KvOpKind::ReleaseSeq:
      known();
      release(op.seq);
      break;
    case KvOpKind::Truncate:
      known();
      truncate(op.seq, op.n);
      break;
    case KvOpKind::DropBefore:
      known();
      drop_blocks_before(op.seq, op.n);
      break;
    case KvOpKind::CopyOnWrite: {
      SeqState& s = known();
      const int64_t index = op.n / block_size_;
      if (op.n < 0 || index >= s.table.size() ||
          refs_[static_cast<size_t>(s.table.blocks_[static_cast<size_t>(index)])] < 2) {
        throw UsageError("KV cache mirror: sequence " + std::to_string(op.seq) + " has no shared block at position " +
                         std::to_string(op.n));
      }
      BlockId& slot = s.table.blocks_[static_cast<size_t>(index)];
      take_block(op.block);
      swap_in_copy(slot, op.block);
      break;
    }
  }
}

uint64_t BlockPool::digest() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (BlockId b : free_) mix(b);
  for (int32_t r : refs_) mix(r);
  std::vector<SeqId> ids;
  for (const auto& [id, state] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (SeqId id : ids) {
    const SeqState& st = seqs_.at(id);
    mix(id);
    for (BlockId b : st.table.blocks_) mix(b);
  }
  return h;
}

int64_t BlockPool::row_of(SeqId seq, int64_t pos) const {
  auto it = seqs_.find(seq);
  if (pos < 0 || it == seqs_.end() || pos >= it->second.table.size() * block_size_) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " has no reserved slot for position " +
                     std::to_string(pos));
  }
  const BlockId block = it->second.table[pos / block_size_];
  if (block == kNoBlock) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " gave back the block of position " +
                     std::to_string(pos) + " (out of its sliding window)");
  }
  return static_cast<int64_t>(block) * block_size_ + pos % block_size_;
}

// One KV head's row of head_dim values at element offset `off` into a quantized type's arrays.
}  // namespace peregrine
