#pragma once
// The paged KV cache's bookkeeping (the PagedAttention layout): which blocks each sequence holds,
// and nothing else. It holds no K/V (that is KvStorage, kv/kv_storage.h, owned by an execution
// context), like vLLM's KVCacheManager. Storage is a set of fixed-size blocks of `block_size`
// token slots; each sequence owns an ordered list of blocks (its BlockTable), so sequences grow
// without reserving a full context each and without copying. Token position p of a sequence lives
// in block table[p / block_size], slot p % block_size.
//
// Ownership: the pool alone hands out and takes back blocks (free list); a BlockTable only lists
// the blocks of one sequence. Every block carries a reference count (one per block table listing
// it, plus one when the prefix cache keeps it); a block returns to the free list only when its
// count drops to zero, so several sequences can share the blocks of a common prefix.
//
// Copy-on-write cannot copy (the pool has no data): make_writable swaps a fresh block into the
// table and records a pending BlockCopy; whoever holds the storage has the context apply the
// pending copies (ExecutionContext::copy_kv_blocks) before anything reads or writes the storage
// again (vLLM's blocks_to_copy). Copies applied later, in order, give the bits of copies made at
// once, since nothing touches the storage in between.
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_journal.h"
#include "util/batch.h"

namespace peregrine {

// The ordered physical blocks of one sequence: entry i holds positions
// [i * block_size, (i + 1) * block_size). Leading entries may be kNoBlock: positions every layer's
// sliding window has passed, whose blocks went back to the pool (drop_blocks_before).
class BlockTable {
 public:
  std::span<const BlockId> blocks() const { return blocks_; }
  int64_t size() const { return static_cast<int64_t>(blocks_.size()); }
  BlockId operator[](int64_t i) const { return blocks_[static_cast<size_t>(i)]; }

 private:
  friend class BlockPool;
  std::vector<BlockId> blocks_;
};

// Copy block `from`'s K/V (every layer) into block `to`: what a copy-on-write owes the storage.
struct BlockCopy {
  BlockId from = -1;
  BlockId to = -1;
  bool operator==(const BlockCopy&) const = default;
};

class BlockPool {
 public:
  // n_blocks in [1, BlockId max], block_size in [1, 65536]; else UsageError.
  BlockPool(int64_t n_blocks, int32_t block_size);

  // Grows `seq`'s block table (creating the sequence if new) so it holds positions [0, n_tokens).
  // Returns false, changing nothing, if there are not enough free blocks.
  bool reserve(SeqId seq, int64_t n_tokens);
  // Returns all of `seq`'s blocks to the free list and forgets the sequence (no-op if unknown).
  void release(SeqId seq);
  // Keeps positions [0, n_tokens) of `seq`, freeing blocks no longer needed.
  void truncate(SeqId seq, int64_t n_tokens);
  // Gives back the blocks of table entries [0, n_entries) of `seq` (each drops one reference: a
  // block shared with the prefix cache or another sequence stays with them) and marks the entries
  // kNoBlock; the table keeps its length, so positions still map to entries. For positions no
  // attention will read again (every layer windowed). Returns how many entries it cleared.
  int64_t drop_blocks_before(SeqId seq, int64_t n_entries);

  // nullptr if the sequence is unknown.
  const BlockTable* block_table(SeqId seq) const;
  // Positions [0, capacity) have a block (0 if unknown). How many of them hold K/V is the
  // engine's record (Sequence::n_computed), not the pool's: the forward pass takes its positions
  // from the batch.
  int64_t capacity(SeqId seq) const;
  // Physical row (block * block_size + slot) of position `pos` in `seq`; throws UsageError if the
  // sequence has no block for it. The model resolves rows once per token, then writes each layer.
  int64_t row_of(SeqId seq, int64_t pos) const;

  // --- Sharing (prefix caching). A block with more than one reference must not be written.
  // Appends an existing, referenced block to `seq`'s table (creating the sequence if new) and
  // takes a reference to it.
  void append_shared_block(SeqId seq, BlockId block);
  // Takes / drops one reference to a block that is in use. Dropping the last reference frees it.
  void retain_block(BlockId block);
  void release_block(BlockId block);
  int32_t ref_count(BlockId block) const;
  // Copy-on-write: if the block holding position `pos` of `seq` is shared, swaps a fresh block
  // into `seq`'s table, drops the reference to the shared one and records the copy the storage
  // owes (pending_copies). Returns false, changing nothing, if it is shared and no block is free.
  bool make_writable(SeqId seq, int64_t pos);
  // The copies recorded since the last clear, in order: apply them to the storage (in this
  // order) before it is next read or written, then clear them.
  std::span<const BlockCopy> pending_copies() const { return copies_; }
  void clear_pending_copies() { copies_.clear(); }

  int64_t n_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }

  // --- Mirroring (tensor / pipeline parallelism, kv/kv_journal.h).
  // Records every later mutation into `journal` (nullptr stops); the caller ships and clears it.
  void set_journal(KvJournal* journal) { journal_ = journal; }
  // Replays one recorded mutation with the block ids it names (on a pool of the same block count
  // and size); a copy-on-write records the same pending copy the primary's did, for this rank's
  // own storage. Throws UsageError if this pool's state disagrees (a block that should be free
  // is not, an unknown sequence): the mirror has diverged.
  void apply(const KvOp& op);
  // A hash of the bookkeeping: free list (in order), reference counts, every sequence's table.
  // Two pools that saw the same mutations have the same digest.
  uint64_t digest() const;

 private:
  struct SeqState {
    BlockTable table;
  };
  BlockId take_free_block();
  void take_block(BlockId block);  // the free `block` (mirroring: the journal names it)
  void drop_ref(BlockId block);    // release_block without the journal
  void swap_in_copy(BlockId& slot, BlockId fresh);
  void record(KvOpKind kind, SeqId seq, BlockId block = -1, int64_t n = 0) {
    if (journal_ != nullptr) journal_->push_back({kind, seq, block, n});
  }

  int64_t n_blocks_;
  int32_t block_size_;
  KvJournal* journal_ = nullptr;
  std::vector<BlockId> free_;  // stack; the next block handed out is free_.back()
  std::vector<int32_t> refs_;  // [n_blocks] references to each block; 0 = on the free list
  std::unordered_map<SeqId, SeqState> seqs_;
  std::vector<BlockCopy> copies_;  // copy-on-write's copies the storage has not had yet
};

}  // namespace peregrine
