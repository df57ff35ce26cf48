#pragma once
// Paged KV cache (the PagedAttention layout). Memory is a pool of fixed-size blocks of
// `block_size` token slots; each sequence owns an ordered list of blocks (its BlockTable), so
// sequences grow without reserving a full context each and without copying. Token position p of
// a sequence lives in block table[p / block_size], slot p % block_size.
//
// Ownership: the cache alone hands out and takes back blocks (free list); a BlockTable only lists
// the blocks of one sequence. Every block carries a reference count (one per block table listing
// it, plus one when the prefix cache keeps it); a block returns to the free list only when its
// count drops to zero, so several sequences can share the blocks of a common prefix.
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_journal.h"
#include "kv/kv_type.h"
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
  friend class KvCache;
  std::vector<BlockId> blocks_;
};

// Read access to one layer's K and V storage, for the attention kernel. Exactly one of the
// f32 / u16 / bytes pointer groups is set, by `type` (u16 holds f16 or bf16 bits; bytes and
// scales hold a quantized type: Q8_0's int8 values, FP8_E4M3's codes or Q4_0's nibbles, and
// their f16 scales; kv/kv_type.h).
// k_f32, v_f32, k_u16, v_u16: [n_blocks][block_size][n_kv_heads][head_dim]
// k_bytes, v_bytes: the same elements, kv_value_byte(type, off) the bytes of element `off`
// k_scales, v_scales: [n_blocks][block_size][n_kv_heads][head_dim / scale_group], so the scale
// of the value at element offset `off` is at off / scale_group.
struct KvLayerView {
  KvType type = KvType::F32;
  const float* k_f32 = nullptr;
  const float* v_f32 = nullptr;
  const uint16_t* k_u16 = nullptr;
  const uint16_t* v_u16 = nullptr;
  const uint8_t* k_bytes = nullptr;
  const uint8_t* v_bytes = nullptr;
  const uint16_t* k_scales = nullptr;
  const uint16_t* v_scales = nullptr;
  int64_t scale_group = 0;  // values per scale (kv_scale_group)
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;

  // Element offset of (block, slot, kv_head, 0).
  size_t offset(BlockId block, int64_t slot, int64_t kv_head) const {
    return static_cast<size_t>(((static_cast<int64_t>(block) * block_size + slot) * n_kv_heads + kv_head) *
                               head_dim);
  }
};

class KvCache {
 public:
  // Allocates n_layers x {K, V} x [n_blocks][block_size][n_kv_heads][head_dim] elements of `type`.
  // Throws UsageError for non-positive or absurd sizes, and for Q8_0 / Q4_0 with a head_dim that
  // is not a multiple of 32.
  KvCache(const KvShape& shape, KvType type, int64_t n_blocks, int32_t block_size = 16);

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
  // engine's record (Sequence::n_computed), not the cache's: the forward pass takes its positions
  // from the batch.
  int64_t capacity(SeqId seq) const;

  // --- Sharing (prefix caching). A block with more than one reference must not be written.
  // Appends an existing, referenced block to `seq`'s table (creating the sequence if new) and
  // takes a reference to it.
  void append_shared_block(SeqId seq, BlockId block);
  // Takes / drops one reference to a block that is in use. Dropping the last reference frees it.
  void retain_block(BlockId block);
  void release_block(BlockId block);
  int32_t ref_count(BlockId block) const;
  // Copy-on-write: if the block holding position `pos` of `seq` is shared, copies its K/V into a
  // fresh block, swaps it into `seq`'s table and drops the reference to the shared one. Returns
  // false, changing nothing, if it is shared and no block is free.
  bool make_writable(SeqId seq, int64_t pos);

  int64_t n_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }
  KvType type() const { return type_; }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  size_t bytes() const;  // K and V storage of all layers (quantized: values and scales)

  // Physical row (block * block_size + slot) of position `pos` in `seq`; throws UsageError if the
  // sequence has no block for it. The model resolves rows once per token, then writes each layer.
  int64_t row_of(SeqId seq, int64_t pos) const;
  // Stores one token's K and V (each [n_kv_heads][head_dim], converted to the cache type; a
  // quantized type quantizes each head's row on its own) at physical row `row` of `layer`.
  void write_row(int64_t layer, int64_t row, std::span<const float> k, std::span<const float> v);
  // Reads one token's K and V back as f32 (each [n_kv_heads][head_dim]); for tests and tools.
  void read_row(int64_t layer, int64_t row, std::span<float> k, std::span<float> v) const;

  KvLayerView layer_view(int64_t layer) const;

  // --- Moving blocks to another process (disaggregated prefill/decode): the K/V of one block,
  // every layer, as bytes ([layer][K values, V values, quantized: K scales, V scales]); importing
  // writes them into a block of a cache of the same shape, type and block size.
  size_t block_bytes() const;
  void export_block(BlockId block, std::span<std::byte> out) const;
  void import_block(BlockId block, std::span<const std::byte> in);
  // The same for the KV heads [h0, h1) of this cache only (pools of tensor-parallel ranks: each
  // decode rank takes its heads from the prefill ranks that hold them), in the same order.
  size_t heads_bytes(int64_t h0, int64_t h1) const;
  void export_heads(BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) const;
  void import_heads(BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in);

  // --- Mirroring (tensor / pipeline parallelism, kv/kv_journal.h).
  // Records every later mutation of the block bookkeeping into `journal` (nullptr stops); the
  // caller ships and clears it.
  void set_journal(KvJournal* journal) { journal_ = journal; }
  // Replays one recorded mutation with the block ids it names (on a cache of the same block count
  // and size; its own shape may differ). Throws UsageError if this cache's state disagrees (a
  // block that should be free is not, an unknown sequence): the mirror has diverged.
  void apply(const KvOp& op);
  // A hash of the bookkeeping: free list (in order), reference counts, every sequence's table. Two caches that saw the same mutations have the same digest.
  uint64_t digest() const;

 private:
  struct SeqState {
    BlockTable table;
  };
  struct Runs {
    size_t first, slots, stride, len;  // `slots` runs of `len` elements, `stride` apart
  };
  struct HeadRuns {
    Runs values, scales;
  };
  HeadRuns head_runs(BlockId block, int64_t h0, int64_t h1) const;

  struct LayerStore {
    std::vector<float> k32, v32;      // used when type_ == F32
    std::vector<uint16_t> k16, v16;   // used for F16 / BF16
    std::vector<uint8_t> kq, vq;      // used for Q8_0 / FP8_E4M3 / Q4_0: values (kv_value_byte)
    std::vector<uint16_t> ks, vs;     // and their f16 scales, one per scale_group_ values
  };
  void quantize_row(const float* x, std::vector<uint8_t>& q, std::vector<uint16_t>& scales, size_t off);
  void dequantize_row(const std::vector<uint8_t>& q, const std::vector<uint16_t>& scales, size_t off,
                      float* dst) const;

  KvType type_;
  int64_t n_blocks_;
  int32_t block_size_;
  int64_t n_layers_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
  int64_t row_elems_;    // n_kv_heads * head_dim
  int64_t scale_group_;  // values per scale of a quantized type (kv_scale_group), 0 otherwise
  std::vector<LayerStore> layers_;
  void copy_block(BlockId from, BlockId to);
  BlockId take_free_block();
  void take_block(BlockId block);   // the free `block` (mirroring: the journal names it)
  void drop_ref(BlockId block);     // release_block without the journal
  void record(KvOpKind kind, SeqId seq, BlockId block = -1, int64_t n = 0) {
    if (journal_ != nullptr) journal_->push_back({kind, seq, block, n});
  }
  KvJournal* journal_ = nullptr;

  std::vector<BlockId> free_;  // stack; the next block handed out is free_.back()
  std::vector<int32_t> refs_;  // [n_blocks] references to each block; 0 = on the free list
  std::unordered_map<SeqId, SeqState> seqs_;
};

}  // namespace peregrine
