#pragma once
// Prefix caching: full KV blocks remembered by the tokens that produced them, so a new request
// whose prompt starts with the same tokens (a system prompt, an earlier chat turn, a few-shot
// header) reuses those blocks instead of recomputing them.
//
// A block is identified by a chained hash: hash(parent block's hash, the block's token ids), so
// equal hashes mean equal whole prefixes, not just equal blocks. A hit is still verified against
// the stored token ids and parent hash (a 64-bit collision must never serve wrong K/V).
// The cache keeps one reference on every block it remembers; a remembered block that no sequence
// uses any more is "evictable", and the least recently used of those goes first when the
// allocator needs room.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace peregrine {

using BlockHash = uint64_t;
inline constexpr BlockHash kNoParentHash = 0;

// Chained hash of one full block. tokens: [block_size] the block's token ids.
BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens);

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // prompt tokens looked up (in full blocks), once per admission
  int64_t hit_tokens = 0;      // of those, served from the cache
  int64_t evictions = 0;
  double hit_rate() const { return queried_tokens > 0 ? double(hit_tokens) / double(queried_tokens) : 0.0; }
};

class PrefixCache {
 public:
  explicit PrefixCache(BlockPool& pool) : pool_(pool) {}
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Hit {
    BlockId block;
    BlockHash hash;
  };
  // The cached blocks holding the longest run of full blocks that starts `tokens` ([n] a prompt),
  // in order, each touched as recently used. The caller takes its own references
  // (BlockPool::append_shared_block) and counts the lookup (a lookup for a request that then waits
  // is repeated, so only the caller knows which one counts).
  std::vector<Hit> match(std::span<const TokenId> tokens);

  // Remembers `block` (a full block whose K/V is computed) as the block after `parent` holding
  // `tokens` ([block_size]); takes a reference. Returns its hash. If that prefix is already
  // cached (maybe in another block), nothing changes.
  BlockHash insert(BlockHash parent, std::span<const TokenId> tokens, BlockId block);

  // Drops the least recently used remembered block that no sequence references; false if none.
  bool evict_one();
  // Remembered blocks that only the cache references (what evict_one could free).
  int64_t n_evictable() const;
  // The same, if each block b in `dropped_refs` had dropped_refs[b] fewer references.
  int64_t n_evictable_after(const std::unordered_map<BlockId, int32_t>& dropped_refs) const;
  int64_t n_cached_blocks() const { return static_cast<int64_t>(entries_.size()); }
  // Drops every remembered block (each one's reference).
  void clear();

  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    BlockId block;
    BlockHash parent;
    std::vector<TokenId> tokens;  // [block_size]
    uint64_t last_used;
  };

  BlockPool& pool_;
  std::unordered_map<BlockHash, Entry> entries_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace peregrine
