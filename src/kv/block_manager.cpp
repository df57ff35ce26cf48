#include "kv/block_manager.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace peregrine {

BlockManager::BlockManager(BlockPool& pool, bool prefix_caching) : pool_(pool) {
  if (prefix_caching) cache_.emplace(pool);
}

int64_t BlockManager::blocks_for(int64_t n_tokens) const {
  return (n_tokens + pool_.block_size() - 1) / pool_.block_size();
}

int64_t BlockManager::n_available_blocks() const {
  return pool_.n_free_blocks() + (cache_ ? cache_->n_evictable() : 0);
}

int64_t BlockManager::n_used_blocks() const { return pool_.n_blocks() - n_available_blocks(); }

int64_t BlockManager::blocks_released_by(std::span<const SeqId> seqs) const {
  std::unordered_map<BlockId, int32_t> dropped;
  for (SeqId seq : seqs) {
    if (const BlockTable* table = pool_.block_table(seq)) {
      for (BlockId b : table->blocks()) ++dropped[b];
    }
  }
  int64_t released = 0;
  // A block the cache remembers keeps the cache's reference, so it never reaches 0 here.
  dropped.erase(kNoBlock);  // entries a sliding window already gave back
  for (const auto& [block, n] : dropped) released += pool_.ref_count(block) == n ? 1 : 0;
  if (cache_) released += cache_->n_evictable_after(dropped) - cache_->n_evictable();
  return released;
}

int64_t BlockManager::attach_cached_prefix(SeqId seq, std::span<const TokenId> tokens) {
  if (pool_.block_table(seq) != nullptr) {
    throw UsageError("block manager: sequence " + std::to_string(seq) + " already has blocks");
  }
  if (!cache_ || tokens.size() < 2) return 0;
  const auto hits = cache_->match(tokens);
  const int64_t bs = pool_.block_size();
  pending_lookups_[seq] = {static_cast<int64_t>(tokens.size()) / bs * bs, static_cast<int64_t>(hits.size()) * bs};
  if (hits.empty()) return 0;
  const int64_t n_cached = std::min<int64_t>(static_cast<int64_t>(hits.size()) * bs,
                                             static_cast<int64_t>(tokens.size()) - 1);
  auto& hashes = hashes_[seq];
  for (const auto& hit : hits) {
    pool_.append_shared_block(seq, hit.block);
    hashes.push_back(hit.hash);
  }
  return n_cached;
}

int64_t BlockManager::blocks_needed(SeqId seq, int64_t from, int64_t n_tokens) const {
  const BlockTable* table = pool_.block_table(seq);
  const int64_t have = table ? table->size() : 0;
  int64_t need = std::max<int64_t>(0, blocks_for(n_tokens) - have);
  const int64_t bs = pool_.block_size();
  for (int64_t b = std::max<int64_t>(0, from) / bs; table && b < have && b * bs < n_tokens; ++b) {
    if (pool_.ref_count((*table)[b]) > 1) ++need;
  }
  return need;
}

bool BlockManager::allocate(SeqId seq, int64_t from, int64_t n_tokens) {
  const int64_t need = blocks_needed(seq, from, n_tokens);
  if (need > n_available_blocks()) return false;
  while (pool_.n_free_blocks() < need) {
    if (!cache_ || !cache_->evict_one()) return false;  // unreachable after the check above
  }
  if (!pool_.reserve(seq, n_tokens)) return false;
  const int64_t bs = pool_.block_size();
  for (int64_t pos = (std::max<int64_t>(0, from) / bs) * bs; pos < n_tokens; pos += bs) {
    if (!pool_.make_writable(seq, pos)) return false;
  }
  if (auto it = pending_lookups_.find(seq); it != pending_lookups_.end()) {
    queried_tokens_ += it->second.first;
    hit_tokens_ += it->second.second;
    pending_lookups_.erase(it);
  }
  return true;
}

void BlockManager::commit(SeqId seq, std::span<const TokenId> tokens, int64_t n_computed) {
  if (!cache_) return;
  const BlockTable* table = pool_.block_table(seq);
  if (table == nullptr) return;
  const int64_t bs = pool_.block_size();
  const int64_t n_full = std::min<int64_t>(std::min<int64_t>(n_computed, static_cast<int64_t>(tokens.size())) / bs,
                                           table->size());
  auto& hashes = hashes_[seq];
  while (static_cast<int64_t>(hashes.size()) < n_full) {
    const int64_t i = static_cast<int64_t>(hashes.size());
    if ((*table)[i] == kNoBlock) break;  // given back before it was remembered: never offered
    const BlockHash parent = i == 0 ? kNoParentHash : hashes.back();
    hashes.push_back(cache_->insert(parent, tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs)),
                                    (*table)[i]));
  }
}

void BlockManager::rollback(SeqId seq, int64_t length, int64_t r) {
  if (r < 0 || r > length || length > pool_.capacity(seq)) {
    throw UsageError("block manager: cannot roll sequence " + std::to_string(seq) + " of " + std::to_string(length) +
                     " tokens back by " + std::to_string(r));
  }
  const int64_t keep = length - r;
  pool_.truncate(seq, keep);
  if (auto it = hashes_.find(seq); it != hashes_.end()) {
    const auto full = static_cast<size_t>(keep / pool_.block_size());
    if (it->second.size() > full) it->second.resize(full);
  }
}

int64_t BlockManager::release_out_of_window(SeqId seq, int64_t next_position) {
  if (window_ <= 0) return 0;
  const int64_t first_read = next_position - window_ + 1;  // the lowest position a later query reads
  if (first_read <= 0) return 0;
  return pool_.drop_blocks_before(seq, first_read / pool_.block_size());
}

void BlockManager::free(SeqId seq) {
  pool_.release(seq);
  hashes_.erase(seq);
  pending_lookups_.erase(seq);
}

void BlockManager::clear_prefix_cache() {
  if (cache_) cache_->clear();
}

PrefixCacheStats BlockManager::prefix_stats() const {
  PrefixCacheStats s = cache_ ? cache_->stats() : PrefixCacheStats{};
  s.queried_tokens = queried_tokens_;
  s.hit_tokens = hit_tokens_;
  return s;
}

}  // namespace peregrine
