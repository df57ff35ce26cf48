#include "kv/prefix_cache.h"

#include <algorithm>
#include <limits>

namespace peregrine {
namespace {

// splitmix64's finalizer: cheap and well mixed, deterministic on every platform.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  for (TokenId t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ULL));
  h = mix(h ^ tokens.size());
  return h == kNoParentHash ? 1 : h;  // 0 is reserved for "no parent"
}

std::vector<PrefixCache::Hit> PrefixCache::match(std::span<const TokenId> tokens) {
  const size_t bs = static_cast<size_t>(pool_.block_size());
  const size_t n_full = tokens.size() / bs;
  std::vector<Hit> out;
  BlockHash parent = kNoParentHash;
  for (size_t i = 0; i < n_full; ++i) {
    const auto block_tokens = tokens.subspan(i * bs, bs);
    const BlockHash h = hash_block(parent, block_tokens);
    auto it = entries_.find(h);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(block_tokens.begin(), block_tokens.end(), it->second.tokens.begin(), it->second.tokens.end())) {
      break;
    }
    it->second.last_used = ++clock_;
    out.push_back(Hit{it->second.block, h});
    parent = h;
  }
  return out;
}

BlockHash PrefixCache::insert(BlockHash parent, std::span<const TokenId> tokens, BlockId block) {
  const BlockHash h = hash_block(parent, tokens);
  auto [it, inserted] = entries_.try_emplace(h);
  if (!inserted) {
    it->second.last_used = ++clock_;
    return h;
  }
  pool_.retain_block(block);
  it->second = Entry{block, parent, std::vector<TokenId>(tokens.begin(), tokens.end()), ++clock_};
  return h;
}

bool PrefixCache::evict_one() {
  auto victim = entries_.end();
  uint64_t oldest = std::numeric_limits<uint64_t>::max();
  // A linear scan: evictions happen only when the free list is empty, and caches hold thousands
  // of blocks, not millions.
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.last_used < oldest && pool_.ref_count(it->second.block) == 1) {
      oldest = it->second.last_used;
      victim = it;
    }
  }
  if (victim == entries_.end()) return false;
  pool_.release_block(victim->second.block);
  entries_.erase(victim);
  ++stats_.evictions;
  return true;
}

int64_t PrefixCache::n_evictable() const {
  int64_t n = 0;
  for (const auto& [h, e] : entries_) n += pool_.ref_count(e.block) == 1 ? 1 : 0;
  return n;
}

int64_t PrefixCache::n_evictable_after(const std::unordered_map<BlockId, int32_t>& dropped_refs) const {
  int64_t n = 0;
  for (const auto& [h, e] : entries_) {
    const auto it = dropped_refs.find(e.block);
    n += pool_.ref_count(e.block) - (it == dropped_refs.end() ? 0 : it->second) == 1 ? 1 : 0;
  }
  return n;
}

void PrefixCache::clear() {
  for (const auto& [h, e] : entries_) pool_.release_block(e.block);
  entries_.clear();
}

}  // namespace peregrine
