// BlockManager::rollback: taking back a sequence's last positions (speculative decoding's
// rejected drafts). Whole blocks past the new length are freed, the prefix cache never offers a
// block for tokens it no longer holds, and a kept block that is shared is copied before the next
// write instead of being overwritten under its other users.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "common/host_kv.h"
#include "kv/block_manager.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

constexpr KvShape kShape{2, 2, 4};  // 2 layers x 2 KV heads x head_dim 4
constexpr int32_t kBlock = 4;

std::vector<TokenId> tokens(int n, int start = 10) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Writes a distinct K/V row for positions [from, to) of `seq` in every layer (value = seed + position).
void write_positions(HostKv& kv, SeqId seq, int64_t from, int64_t to, float seed) {
  std::vector<float> row(static_cast<size_t>(kShape.n_kv_heads * kShape.head_dim));
  for (int64_t p = from; p < to; ++p) {
    std::fill(row.begin(), row.end(), seed + static_cast<float>(p));
    for (int64_t l = 0; l < kShape.n_layers; ++l) kv.write(l, seq, p, row, row);
  }
}

float read_k(HostKv& kv, SeqId seq, int64_t pos) {
  std::vector<float> k(static_cast<size_t>(kShape.n_kv_heads * kShape.head_dim)), v(k.size());
  kv.read(0, seq, pos, k, v);
  return k[0];
}

TEST(BlockManagerRollback, AcrossABlockBoundaryFreesTheWholeBlocksPastTheNewLength) {
  HostKv kv(kShape, KvType::F32, 8, kBlock);
  BlockManager bm(kv.pool, /*prefix_caching=*/true);
  const auto toks = tokens(10);
  ASSERT_TRUE(bm.allocate(1, 0, 10));  // 3 blocks: positions 0-3, 4-7, 8-9
  write_positions(kv, 1, 0, 10, 100.f);
  bm.commit(1, toks, 10);  // blocks 0 and 1 are full and remembered
  ASSERT_EQ(kv.pool.block_table(1)->size(), 3);
  const int64_t free_before = kv.pool.n_free_blocks();

  bm.rollback(1, 10, 4);  // 10 -> 6: the third block goes, the second is now partial
  EXPECT_EQ(kv.pool.block_table(1)->size(), 2);
  EXPECT_EQ(kv.pool.n_free_blocks(), free_before + 1);
  EXPECT_EQ(read_k(kv, 1, 5), 105.f);  // what is kept is untouched

  // Generation continues with other tokens at positions 6..9: the second block is shared with the
  // prefix cache (it was remembered full), so it is copied before the write.
  const BlockId cached_second = (*kv.pool.block_table(1))[1];
  ASSERT_TRUE(bm.allocate(1, 6, 10));
  EXPECT_NE((*kv.pool.block_table(1))[1], cached_second);
  write_positions(kv, 1, 6, 10, 500.f);
  EXPECT_EQ(read_k(kv, 1, 5), 105.f);  // copied with the block
  EXPECT_EQ(read_k(kv, 1, 6), 506.f);

  // A new request with the original first 8 tokens still finds both original blocks: their K/V
  // were never overwritten.
  const auto hit = bm.attach_cached_prefix(2, toks);
  EXPECT_EQ(hit, 8);
  EXPECT_EQ((*kv.pool.block_table(2))[1], cached_second);
  EXPECT_EQ(read_k(kv, 2, 7), 107.f);

  // The rolled-back sequence's new tokens form a different chain: committing them does not
  // confuse the cache (a request with the new tokens matches only the first block).
  auto changed = toks;
  for (int i = 6; i < 10; ++i) changed[static_cast<size_t>(i)] = 900 + i;
  bm.commit(1, changed, 10);
  bm.free(1);
  bm.free(2);
  EXPECT_EQ(bm.attach_cached_prefix(3, changed), 8);  // both full blocks of the new chain
  EXPECT_EQ(read_k(kv, 3, 6), 506.f);
  bm.free(3);
  bm.clear_prefix_cache();
  EXPECT_EQ(kv.pool.n_free_blocks(), kv.pool.n_blocks());
}

TEST(BlockManagerRollback, SharedPrefixBlocksStayWithTheirOtherUsers) {
  HostKv kv(kShape, KvType::F16, 8, kBlock);
  BlockManager bm(kv.pool, /*prefix_caching=*/true);
  const auto toks = tokens(8);
  ASSERT_TRUE(bm.allocate(1, 0, 8));
  write_positions(kv, 1, 0, 8, 0.f);
  bm.commit(1, toks, 8);
  // Sequence 2 shares both of sequence 1's blocks through the prefix cache (all but the last
  // token cached), then grows past them.
  ASSERT_EQ(bm.attach_cached_prefix(2, tokens(12)), 8);
  ASSERT_TRUE(bm.allocate(2, 8, 12));
  write_positions(kv, 2, 8, 12, 50.f);
  const BlockId shared0 = (*kv.pool.block_table(2))[0], shared1 = (*kv.pool.block_table(2))[1];
  EXPECT_EQ(kv.pool.ref_count(shared1), 3);  // sequence 1, sequence 2, the prefix cache

  bm.rollback(2, 12, 6);  // 12 -> 6: back into the shared second block
  EXPECT_EQ(kv.pool.block_table(2)->size(), 2);
  EXPECT_EQ(kv.pool.ref_count(shared1), 3);  // still shared: nobody lost it
  ASSERT_TRUE(bm.allocate(2, 6, 8));    // the next write copies the shared block first
  EXPECT_NE((*kv.pool.block_table(2))[1], shared1);
  EXPECT_EQ((*kv.pool.block_table(2))[0], shared0);
  write_positions(kv, 2, 6, 8, 70.f);
  EXPECT_EQ(read_k(kv, 1, 6), 6.f);  // sequence 1's K/V unchanged
  EXPECT_EQ(read_k(kv, 2, 6), 76.f);
  EXPECT_EQ(read_k(kv, 2, 5), 5.f);
  bm.free(1);
  bm.free(2);
  bm.clear_prefix_cache();
  EXPECT_EQ(kv.pool.n_free_blocks(), kv.pool.n_blocks());
}

TEST(BlockManagerRollback, RejectsRollingBackMoreThanTheSequenceHolds) {
  HostKv kv(kShape, KvType::F32, 4, kBlock);
  BlockManager bm(kv.pool, false);
  ASSERT_TRUE(bm.allocate(1, 0, 3));
  write_positions(kv, 1, 0, 3, 0.f);
  EXPECT_THROW(bm.rollback(1, 3, 4), UsageError);
  EXPECT_THROW(bm.rollback(1, 3, -1), UsageError);
  EXPECT_THROW(bm.rollback(1, 5, 1), UsageError);  // a length past its blocks
  bm.rollback(1, 3, 3);
  EXPECT_EQ(kv.pool.block_table(1)->size(), 0);
  EXPECT_EQ(kv.pool.n_free_blocks(), 4);
}

}  // namespace
}  // namespace peregrine
