#pragma once
// Sequence-level KV block management for the serving engine (nano-vllm's BlockManager): which
// blocks a sequence gets, when prefix-cached blocks are reused, when a shared block is copied
// before a write, and which freshly computed blocks are remembered for later requests.
// The BlockPool underneath owns the blocks and their reference counts.
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace peregrine {

class BlockManager {
 public:
  BlockManager(BlockPool& pool, bool prefix_caching);
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  BlockPool& pool() { return pool_; }
  bool prefix_caching() const { return cache_.has_value(); }
  int64_t blocks_for(int64_t n_tokens) const;
  // Blocks an allocation can obtain: free ones plus cached ones no sequence uses.
  int64_t n_available_blocks() const;
  // Blocks that are neither free nor merely cached: in use by sequences.
  int64_t n_used_blocks() const;
  // How many more blocks would be available if every sequence in `seqs` were freed (a block
  // shared with a sequence not in the list stays in use). For preemption decisions.
  int64_t blocks_released_by(std::span<const SeqId> seqs) const;

  // For a sequence not yet in the cache: shares the cached blocks that hold a prefix of `tokens`
  // ([n] its prompt, or prompt + output when recomputing) and returns how many leading tokens
  // already have K/V. At least the last token is left to compute (its logits are needed), so a
  // fully cached prompt leaves its last block shared and allocate() copies it before writing.
  int64_t attach_cached_prefix(SeqId seq, std::span<const TokenId> tokens);

  // Blocks allocate(seq, from, n_tokens) would need (new blocks plus copies of shared ones).
  int64_t blocks_needed(SeqId seq, int64_t from, int64_t n_tokens) const;
  // Gives `seq` room for positions [0, n_tokens) with positions [from, n_tokens) writable,
  // evicting unused cached blocks as needed. Returns false, changing nothing, if it cannot.
  bool allocate(SeqId seq, int64_t from, int64_t n_tokens);

  // After a forward pass wrote K/V for positions [0, n_computed) of `seq` (tokens: [>= n_computed]
  // its token ids): remembers its newly completed full blocks in the prefix cache.
  void commit(SeqId seq, std::span<const TokenId> tokens, int64_t n_computed);

  // Takes back the last r of the `length` positions `seq` holds K/V for (0 <= r <= length, the
  // caller's record; the cache keeps none): the blocks past the new
  // length return to their other users or the free list, and the hashes of blocks that are no
  // longer full are forgotten, so they are never offered as a prefix of these tokens. A kept
  // block that is shared (with the prefix cache or other sequences) stays shared until the next
  // write into it, which allocate() copies first. Speculative decoding uses this to drop the
  // K/V of rejected draft tokens.
  void rollback(SeqId seq, int64_t length, int64_t r);

  // Sliding-window attention in every layer (ModelConfig::kv_window; 0, the default, keeps
  // everything): a query at position p reads keys in (p - window, p] only.
  void set_window(int64_t window) { window_ = window; }
  int64_t window() const { return window_; }
  // With a window: gives back the blocks of `seq` that hold only positions below
  // next_position - window + 1 (no query from next_position on reads them), after commit() has
  // remembered what the prefix cache should keep. A block the prefix cache holds keeps the
  // cache's reference (its K/V depends only on the tokens before it, so it stays a valid prefix
  // for other requests); only this sequence's table lets go of it. The rule for the prefix cache:
  // commit() never hashes an entry that was given back, so a sequence offers as a prefix only
  // the blocks it (or the cache) still holds. Returns the entries cleared.
  int64_t release_out_of_window(SeqId seq, int64_t next_position);

  // Drops the sequence's references (shared blocks stay with their other users or the cache).
  void free(SeqId seq);
  // Drops every cached block (for tests: afterwards every block must be free).
  void clear_prefix_cache();

  PrefixCacheStats prefix_stats() const;

 private:
  BlockPool& pool_;
  std::optional<PrefixCache> cache_;
  // Hashes of each sequence's leading full blocks already remembered (the chain's parents).
  std::unordered_map<SeqId, std::vector<BlockHash>> hashes_;
  // A lookup counts once its sequence is admitted (its first successful allocate), so a request
  // that waits and looks up again every step is not counted again: (queried, hit) tokens.
  std::unordered_map<SeqId, std::pair<int64_t, int64_t>> pending_lookups_;
  int64_t window_ = 0;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace peregrine
