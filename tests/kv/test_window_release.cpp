// BlockManager::release_out_of_window: the blocks a sliding window has passed go back to the pool;
// a block the prefix cache remembers stays cached (only the sequence lets go) and still serves as
// a prefix; a given-back entry is never remembered afterwards; and the journal replays it on a
// mirror (tensor / pipeline parallel ranks).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/host_kv.h"
#include "kv/block_manager.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

constexpr KvShape kShape{1, 1, 4};
constexpr int32_t kBlock = 4;

std::vector<TokenId> tokens(int n, int start = 10) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Computes positions [from, to) of `seq` as the engine would: room, K/V, commit, release.
void step(HostKv& kv, BlockManager& bm, SeqId seq, const std::vector<TokenId>& toks, int64_t from, int64_t to) {
  ASSERT_TRUE(bm.allocate(seq, from, to));
  std::vector<float> row(4);
  for (int64_t p = from; p < to; ++p) {
    std::fill(row.begin(), row.end(), static_cast<float>(p));
    kv.write(0, seq, p, row, row);
  }
  bm.commit(seq, toks, to);
  bm.release_out_of_window(seq, to);
}

TEST(WindowRelease, GivesBackTheBlocksBehindTheWindowOnly) {
  HostKv kv(kShape, KvType::F32, 16, kBlock);
  BlockManager bm(kv.pool, /*prefix_caching=*/false);
  bm.set_window(6);
  const auto toks = tokens(40);
  for (int64_t p = 0; p < 30; ++p) step(kv, bm, 1, toks, p, p + 1);
  // The next query (position 30) reads 25..30: blocks 0-5 (positions 0-23) are given back.
  const BlockTable& t = *kv.pool.block_table(1);
  EXPECT_EQ(t.size(), 8);  // the table keeps its length: positions still map to entries
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(t[i], kNoBlock) << i;
  EXPECT_NE(t[6], kNoBlock);
  EXPECT_EQ(kv.pool.n_free_blocks(), 16 - 2);
  EXPECT_THROW(kv.pool.row_of(1, 3), UsageError);
  std::vector<float> k(4), v(4);
  kv.read(0, 1, 25, k, v);
  EXPECT_EQ(k[0], 25.f);
  // Rolling back drafts within the window and freeing the sequence leave nothing behind.
  bm.rollback(1, 30, 2);
  EXPECT_EQ(bm.blocks_released_by(std::vector<SeqId>{1}), 1);  // positions 24-27; 28-29 went with the rollback
  bm.free(1);
  EXPECT_EQ(kv.pool.n_free_blocks(), 16);
}

TEST(WindowRelease, CachedBlocksStayWithThePrefixCache) {
  HostKv kv(kShape, KvType::F32, 16, kBlock);
  BlockManager bm(kv.pool, /*prefix_caching=*/true);
  bm.set_window(4);
  const auto toks = tokens(20);
  step(kv, bm, 1, toks, 0, 16);  // one prompt chunk: blocks 0-3 full and remembered, 0-2 behind the window
  EXPECT_EQ((*kv.pool.block_table(1))[0], kNoBlock);
  EXPECT_EQ(bm.n_used_blocks(), 1);  // the sequence holds only its last block; the rest are cached
  // Another request with the same prompt reuses the cached prefix, given-back blocks included.
  EXPECT_EQ(bm.attach_cached_prefix(2, toks), 16);
  // A given-back entry is never remembered later: the prefix cache keeps what it had.
  bm.free(1);
  bm.free(2);
  bm.clear_prefix_cache();
  EXPECT_EQ(kv.pool.n_free_blocks(), 16);
}

TEST(WindowRelease, AMirrorReplaysTheRelease) {
  HostKv primary(kShape, KvType::F32, 12, kBlock), mirror(KvShape{1, 1, 8}, KvType::F32, 12, kBlock);
  KvJournal journal;
  primary.pool.set_journal(&journal);
  BlockManager bm(primary.pool, /*prefix_caching=*/false);
  bm.set_window(5);
  const auto toks = tokens(30);
  for (int64_t p = 0; p < 24; p += 3) step(primary, bm, 7, toks, p, p + 3);
  EXPECT_GT(primary.pool.n_free_blocks(), 12 - 6);
  for (const KvOp& op : journal) mirror.pool.apply(op);
  EXPECT_EQ(primary.pool.digest(), mirror.pool.digest());
}

}  // namespace
}  // namespace peregrine
