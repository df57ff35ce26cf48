#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "common/host_kv.h"
#include "kv/block_manager.h"
#include "kv/kv_sizing.h"
#include "kv/prefix_cache.h"
#include "model/config.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

ModelConfig small_config() {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.dim = 16;
  c.context_length = 64;
  return c;
}

std::vector<float> random_row(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<TokenId> iota_tokens(int n, int start = 10) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(KvRefCounts, SharedBlockIsFreedByItsLastUser) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 4, 4);
  ASSERT_TRUE(kv.pool.reserve(1, 4));
  const BlockId b = (*kv.pool.block_table(1))[0];
  EXPECT_EQ(kv.pool.ref_count(b), 1);
  kv.pool.append_shared_block(2, b);
  EXPECT_EQ(kv.pool.ref_count(b), 2);
  EXPECT_EQ(kv.pool.capacity(2), 4);
  kv.pool.release(1);
  EXPECT_EQ(kv.pool.ref_count(b), 1);
  EXPECT_EQ(kv.pool.n_free_blocks(), 3);
  kv.pool.release(2);
  EXPECT_EQ(kv.pool.ref_count(b), 0);
  EXPECT_EQ(kv.pool.n_free_blocks(), 4);
  EXPECT_THROW(kv.pool.append_shared_block(3, b), UsageError);  // free blocks cannot be shared
  EXPECT_THROW(kv.pool.release_block(b), UsageError);
}

TEST(KvRefCounts, CopyOnWriteCopiesEveryLayerAndLeavesTheOriginal) {
  for (KvType type : {KvType::F32, KvType::F16}) {
    HostKv kv(small_config().kv_shape(), type, 4, 4);
    std::mt19937 rng(7);
    ASSERT_TRUE(kv.pool.reserve(1, 4));
    const size_t n = 2 * 4;
    std::vector<std::vector<float>> ks, vs;
    for (int l = 0; l < 2; ++l) {
      for (int p = 0; p < 4; ++p) {
        ks.push_back(random_row(rng, n));
        vs.push_back(random_row(rng, n));
        kv.write(l, 1, p, ks.back(), vs.back());
      }
    }
    const BlockId shared = (*kv.pool.block_table(1))[0];
    kv.pool.append_shared_block(2, shared);
    ASSERT_TRUE(kv.pool.make_writable(2, 3));
    const BlockId copy = (*kv.pool.block_table(2))[0];
    EXPECT_NE(copy, shared);
    EXPECT_EQ(kv.pool.ref_count(shared), 1);
    EXPECT_EQ(kv.pool.ref_count(copy), 1);
    std::vector<float> k1(n), v1(n), k2(n), v2(n);
    for (int l = 0; l < 2; ++l) {
      for (int p = 0; p < 4; ++p) {
        kv.read(l, 1, p, k1, v1);
        kv.read(l, 2, p, k2, v2);
        EXPECT_EQ(k1, k2);
        EXPECT_EQ(v1, v2);
      }
    }
    // Writing the copy leaves the original alone.
    const auto other = random_row(rng, n);
    kv.write(1, 2, 3, other, other);
    kv.read(1, 1, 3, k1, v1);
    kv.read(1, 2, 3, k2, v2);
    EXPECT_NE(k1, k2);
    EXPECT_TRUE(kv.pool.make_writable(2, 3));  // already private: no-op
    EXPECT_EQ((*kv.pool.block_table(2))[0], copy);
  }
}

TEST(KvRefCounts, CopyOnWriteFailsCleanlyWithoutAFreeBlock) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 1, 4);
  ASSERT_TRUE(kv.pool.reserve(1, 4));
  kv.pool.append_shared_block(2, (*kv.pool.block_table(1))[0]);
  EXPECT_FALSE(kv.pool.make_writable(2, 0));
  EXPECT_EQ((*kv.pool.block_table(2))[0], (*kv.pool.block_table(1))[0]);
}

TEST(PrefixHash, ChainsParentAndTokens) {
  const auto a = iota_tokens(4), b = iota_tokens(4, 11);
  EXPECT_EQ(hash_block(kNoParentHash, a), hash_block(kNoParentHash, a));
  EXPECT_NE(hash_block(kNoParentHash, a), hash_block(kNoParentHash, b));
  EXPECT_NE(hash_block(hash_block(kNoParentHash, a), b), hash_block(hash_block(kNoParentHash, b), b));
  EXPECT_NE(hash_block(kNoParentHash, a), kNoParentHash);
}

TEST(PrefixCache, MatchesTheLongestCachedRunOfFullBlocks) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 8, 4);
  PrefixCache cache(kv.pool);
  const auto tokens = iota_tokens(10);  // 2 full blocks + 2 tokens
  ASSERT_TRUE(kv.pool.reserve(1, 10));
  const auto& table = *kv.pool.block_table(1);
  const BlockHash h0 = cache.insert(kNoParentHash, std::span(tokens).first(4), table[0]);
  cache.insert(h0, std::span(tokens).subspan(4, 4), table[1]);
  EXPECT_EQ(cache.n_cached_blocks(), 2);
  EXPECT_EQ(kv.pool.ref_count(table[0]), 2);

  auto hits = cache.match(tokens);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].block, table[0]);
  EXPECT_EQ(hits[1].block, table[1]);
  // A prompt that differs in the second block hits only the first.
  auto other = tokens;
  other[5] = 99;
  EXPECT_EQ(cache.match(other).size(), 1u);
  // The same second block after a different first block is a different prefix.
  auto shifted = tokens;
  shifted[0] = 99;
  EXPECT_EQ(cache.match(shifted).size(), 0u);
}

TEST(PrefixCache, EvictsOnlyUnreferencedBlocksLeastRecentlyUsedFirst) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 8, 4);
  PrefixCache cache(kv.pool);
  std::vector<BlockId> blocks;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(kv.pool.reserve(s, 4));
    blocks.push_back((*kv.pool.block_table(s))[0]);
    cache.insert(kNoParentHash, iota_tokens(4, 100 * s), blocks.back());
  }
  EXPECT_EQ(cache.n_evictable(), 0);  // all still used by their sequences
  EXPECT_FALSE(cache.evict_one());
  kv.pool.release(0);
  kv.pool.release(1);
  kv.pool.release(2);
  EXPECT_EQ(cache.n_evictable(), 3);
  cache.match(iota_tokens(4, 0));  // block 0 becomes the most recent
  ASSERT_TRUE(cache.evict_one());
  EXPECT_EQ(kv.pool.ref_count(blocks[1]), 0);
  ASSERT_TRUE(cache.evict_one());
  EXPECT_EQ(kv.pool.ref_count(blocks[2]), 0);
  EXPECT_EQ(kv.pool.ref_count(blocks[0]), 1);
  cache.clear();
  EXPECT_EQ(kv.pool.n_free_blocks(), 8);
  EXPECT_EQ(cache.stats().evictions, 2);
}

TEST(BlockManager, AttachesCachedPrefixAndCopiesTheSharedLastBlockBeforeWriting) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 8, 4);
  BlockManager bm(kv.pool, true);
  const auto tokens = iota_tokens(8);  // exactly 2 blocks
  ASSERT_TRUE(bm.allocate(1, 0, 8));
  bm.commit(1, tokens, 8);
  EXPECT_EQ(bm.n_used_blocks(), 2);

  // A second sequence with the same prompt reuses both blocks but must compute the last token.
  EXPECT_EQ(bm.attach_cached_prefix(2, tokens), 7);
  EXPECT_EQ(bm.blocks_needed(2, 7, 8), 1);  // copy of the shared second block
  const BlockId shared_second = (*kv.pool.block_table(1))[1];
  ASSERT_TRUE(bm.allocate(2, 7, 9));        // and a new third block
  EXPECT_EQ((*kv.pool.block_table(2))[0], (*kv.pool.block_table(1))[0]);
  EXPECT_NE((*kv.pool.block_table(2))[1], shared_second);
  EXPECT_EQ(kv.pool.capacity(2), 12);

  EXPECT_EQ(bm.prefix_stats().queried_tokens, 8);  // counted when its blocks were allocated
  EXPECT_EQ(bm.prefix_stats().hit_tokens, 8);
  // A longer prompt with the same first block but a different second one hits one block; its
  // lookup counts only once it is admitted (allocate), and a freed attempt never counts.
  auto diverging = iota_tokens(12);
  diverging[6] = 1;
  EXPECT_EQ(bm.attach_cached_prefix(3, diverging), 4);
  bm.free(3);
  EXPECT_EQ(bm.prefix_stats().queried_tokens, 8);
  EXPECT_EQ(bm.attach_cached_prefix(3, diverging), 4);
  ASSERT_TRUE(bm.allocate(3, 4, 12));
  EXPECT_EQ(bm.prefix_stats().queried_tokens, 20);
  EXPECT_EQ(bm.prefix_stats().hit_tokens, 12);
  EXPECT_NEAR(bm.prefix_stats().hit_rate(), 0.6, 1e-12);

  bm.free(1);
  bm.free(2);
  bm.free(3);
  EXPECT_EQ(bm.n_used_blocks(), 0);
  EXPECT_GT(kv.pool.n_free_blocks() + 0, 0);
  bm.clear_prefix_cache();
  EXPECT_EQ(kv.pool.n_free_blocks(), 8);
}

TEST(BlockManager, EvictsCachedBlocksToMakeRoomAndRefusesBeyondCapacity) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 4, 4);
  BlockManager bm(kv.pool, true);
  ASSERT_TRUE(bm.allocate(1, 0, 16));
  bm.commit(1, iota_tokens(16), 16);
  bm.free(1);
  EXPECT_EQ(kv.pool.n_free_blocks(), 0);  // all cached
  EXPECT_EQ(bm.n_available_blocks(), 4);
  ASSERT_TRUE(bm.allocate(2, 0, 12));       // evicts three
  EXPECT_EQ(bm.prefix_stats().evictions, 3);
  EXPECT_FALSE(bm.allocate(3, 0, 8));        // one left
  EXPECT_EQ(kv.pool.block_table(3), nullptr);
  bm.free(2);
  bm.clear_prefix_cache();
  EXPECT_EQ(kv.pool.n_free_blocks(), 4);
}

TEST(BlockManager, WithoutPrefixCachingNothingIsShared) {
  HostKv kv(small_config().kv_shape(), KvType::F32, 8, 4);
  BlockManager bm(kv.pool, false);
  ASSERT_TRUE(bm.allocate(1, 0, 8));
  bm.commit(1, iota_tokens(8), 8);
  EXPECT_EQ(bm.attach_cached_prefix(2, iota_tokens(8)), 0);
  bm.free(1);
  EXPECT_EQ(kv.pool.n_free_blocks(), 8);
}

TEST(KvSizing, ParsesMemorySizes) {
  EXPECT_EQ(parse_memory_size("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(parse_memory_size("512mib"), int64_t{512} << 20);
  EXPECT_EQ(parse_memory_size("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(parse_memory_size("1GB"), 1000000000);
  EXPECT_EQ(parse_memory_size("4096"), 4096);
  for (const char* bad : {"", "GiB", "2 GiB", "2TiB", "-1", "0", "2000000GiB", "1..5G"}) {
    EXPECT_THROW(parse_memory_size(bad), UsageError) << bad;
  }
}

TEST(KvSizing, CountsBlocksTokensAndSequences) {
  ModelConfig c = small_config();  // 2 layers * 2 heads * 4 dims: 16 elems * 2 (K,V) per token
  const KvSizing p = size_kv_cache(c.kv_shape(), c.context_length, KvType::F16, 10000, 16);
  EXPECT_EQ(p.bytes_per_token, 2 * 2 * 2 * 4 * 2);
  EXPECT_EQ(p.n_blocks, 10000 / (64 * 16));
  EXPECT_EQ(p.tokens, p.n_blocks * 16);
  EXPECT_EQ(p.full_sequences, p.tokens / 64);
  EXPECT_LE(p.bytes, 10000);
  EXPECT_THROW(size_kv_cache(c.kv_shape(), c.context_length, KvType::F16, 100, 16), UsageError);
  EXPECT_NE(describe_kv_sizing(p, KvType::F16, 64).find("144 tokens"), std::string::npos);
}

}  // namespace
}  // namespace peregrine
