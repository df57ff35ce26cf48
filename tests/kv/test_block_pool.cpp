#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_type.h"
#include "util/error.h"

namespace peregrine {
namespace {

TEST(KvType, NamesRoundTrip) {
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0, KvType::FP8_E4M3, KvType::Q4_0}) {
    EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  }
  EXPECT_EQ(parse_kv_type("F16"), KvType::F16);
  EXPECT_EQ(parse_kv_type("Q8_0"), KvType::Q8_0);
  EXPECT_FALSE(parse_kv_type("q8").has_value());
  EXPECT_EQ(parse_kv_type("fp8"), KvType::FP8_E4M3);  // vLLM's name
  EXPECT_FALSE(parse_kv_type("fp8_e5m2").has_value());
  EXPECT_EQ(kv_row_bytes(KvType::F32, 64), 256u);
  EXPECT_EQ(kv_row_bytes(KvType::BF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvType::Q8_0, 64), 68u);  // 64 int8 + 2 f16 scales
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvType::F16, 64), 2.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvType::Q8_0, 64), 1.0625);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvType::Q4_0, 64), 0.5625);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvType::FP8_E4M3, 64), 66.0 / 64.0);
  EXPECT_TRUE(kv_type_supports_head_dim(KvType::Q8_0, 64));
  EXPECT_TRUE(kv_type_supports_head_dim(KvType::Q8_0, 48));  // one scale per row
  EXPECT_EQ(kv_row_bytes(KvType::Q8_0, 48), 50u);
  EXPECT_FALSE(kv_type_supports_head_dim(KvType::Q4_0, 7));
  EXPECT_TRUE(kv_type_supports_head_dim(KvType::F16, 48));
}

TEST(BlockPool, RejectsBadSizes) {
  EXPECT_THROW(BlockPool(0, 16), UsageError);
  EXPECT_THROW(BlockPool(4, 0), UsageError);
  EXPECT_THROW(BlockPool(int64_t{1} << 40, 16), UsageError);
}

TEST(BlockPool, ReserveReleaseTruncateAccounting) {
  BlockPool kv(8, 4);
  EXPECT_EQ(kv.block_table(7), nullptr);
  EXPECT_TRUE(kv.reserve(7, 5));  // 2 blocks
  ASSERT_NE(kv.block_table(7), nullptr);
  EXPECT_EQ(kv.block_table(7)->size(), 2);
  EXPECT_EQ(kv.capacity(7), 8);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  EXPECT_TRUE(kv.reserve(7, 8));  // still 2 blocks
  EXPECT_EQ(kv.n_free_blocks(), 6);
  EXPECT_TRUE(kv.reserve(7, 3));  // never shrinks
  EXPECT_EQ(kv.block_table(7)->size(), 2);
  EXPECT_TRUE(kv.reserve(9, 16));  // 4 blocks
  EXPECT_EQ(kv.n_free_blocks(), 2);

  // Every block is owned once.
  std::vector<int> owners(8, 0);
  for (SeqId s : {7, 9})
    for (BlockId b : kv.block_table(s)->blocks()) owners[static_cast<size_t>(b)]++;
  EXPECT_EQ(std::count(owners.begin(), owners.end(), 1), 6);

  kv.truncate(9, 5);  // keeps 2 blocks
  EXPECT_EQ(kv.block_table(9)->size(), 2);
  EXPECT_EQ(kv.n_free_blocks(), 4);
  kv.truncate(9, 0);
  EXPECT_EQ(kv.block_table(9)->size(), 0);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  kv.release(7);
  EXPECT_EQ(kv.block_table(7), nullptr);
  EXPECT_EQ(kv.n_free_blocks(), 8);
  kv.release(12345);  // unknown: no-op
  EXPECT_EQ(kv.n_free_blocks(), 8);
  EXPECT_THROW(kv.reserve(1, -1), UsageError);
}

TEST(BlockPool, OutOfBlocksLeavesStateUnchanged) {
  BlockPool kv(4, 4);
  ASSERT_TRUE(kv.reserve(1, 6));  // 2 blocks
  const std::vector<BlockId> before(kv.block_table(1)->blocks().begin(), kv.block_table(1)->blocks().end());
  EXPECT_FALSE(kv.reserve(1, 17));  // needs 5 in all
  EXPECT_EQ(kv.n_free_blocks(), 2);
  EXPECT_EQ(std::vector<BlockId>(kv.block_table(1)->blocks().begin(), kv.block_table(1)->blocks().end()), before);
  EXPECT_FALSE(kv.reserve(2, 12));  // new sequence needing 3
  EXPECT_EQ(kv.block_table(2), nullptr);
  EXPECT_EQ(kv.n_free_blocks(), 2);
  EXPECT_TRUE(kv.reserve(2, 8));
  EXPECT_EQ(kv.n_free_blocks(), 0);
}

// Copy-on-write in the pool copies nothing: it swaps a fresh block in and records the copy the
// storage owes; a mirror replaying the journal records the same copy, and the digests agree.
TEST(BlockPool, CopyOnWriteRecordsThePendingCopyOnThePrimaryAndItsMirror) {
  BlockPool primary(6, 4), mirror(6, 4);
  KvJournal journal;
  primary.set_journal(&journal);
  ASSERT_TRUE(primary.reserve(1, 8));
  const BlockId shared = (*primary.block_table(1))[1];
  primary.append_shared_block(2, (*primary.block_table(1))[0]);
  primary.append_shared_block(2, shared);
  EXPECT_TRUE(primary.pending_copies().empty());
  ASSERT_TRUE(primary.make_writable(2, 6));
  const BlockId fresh = (*primary.block_table(2))[1];
  EXPECT_NE(fresh, shared);
  ASSERT_EQ(primary.pending_copies().size(), 1u);
  EXPECT_EQ(primary.pending_copies()[0], (BlockCopy{shared, fresh}));
  EXPECT_TRUE(primary.make_writable(2, 7));  // private now: nothing more to copy
  EXPECT_EQ(primary.pending_copies().size(), 1u);
  for (const KvOp& op : journal) mirror.apply(op);
  ASSERT_EQ(mirror.pending_copies().size(), 1u);
  EXPECT_EQ(mirror.pending_copies()[0], primary.pending_copies()[0]);
  EXPECT_EQ(mirror.digest(), primary.digest());
  primary.clear_pending_copies();
  EXPECT_TRUE(primary.pending_copies().empty());
  EXPECT_EQ(mirror.digest(), primary.digest());  // pending copies are not bookkeeping
}

}  // namespace
}  // namespace peregrine
