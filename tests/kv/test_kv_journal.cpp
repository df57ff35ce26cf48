// KV journals (kv/kv_journal.h): a mirror cache that applies the primary's journal keeps the same
// block ids, reference counts, free list and tables through prefix hits, copy-on-write, rollback
// and frees, so K/V each side writes at the same rows stays consistent; a mirror that disagrees
// is refused, not silently corrupted.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "common/host_kv.h"
#include "kv/block_manager.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

// What a rank writes at (seq, pos): its own function of the token, so a row read back through the
// mirror's tables shows whether the block ids agree.
float value_of(TokenId token, int64_t pos, int64_t i, float rank_scale) {
  return rank_scale * static_cast<float>(token * 1000 + pos) + static_cast<float>(i);
}

struct Side {
  Side(const KvShape& shape, float scale) : kv(shape, KvType::F32, 24, 4), scale(scale) {}
  HostKv kv;
  float scale;

  void write(SeqId seq, const std::vector<TokenId>& tokens, int64_t from, int64_t to) {
    const int64_t width = kv.storage.n_kv_heads() * kv.storage.head_dim();
    std::vector<float> k(static_cast<size_t>(width)), v(static_cast<size_t>(width));
    for (int64_t p = from; p < to; ++p) {
      for (int64_t i = 0; i < width; ++i) k[i] = v[i] = value_of(tokens[p], p, i, scale);
      for (int64_t l = 0; l < kv.storage.n_layers(); ++l) kv.write(l, seq, p, k, v);
    }
  }
  void expect_rows(SeqId seq, const std::vector<TokenId>& tokens, int64_t n) {
    const int64_t width = kv.storage.n_kv_heads() * kv.storage.head_dim();
    std::vector<float> k(static_cast<size_t>(width)), v(static_cast<size_t>(width));
    for (int64_t p = 0; p < n; ++p) {
      kv.read(kv.storage.n_layers() - 1, seq, p, k, v);
      ASSERT_EQ(k[1], value_of(tokens[p], p, 1, scale)) << "seq " << seq << " pos " << p;
    }
  }
};

TEST(KvJournal, AMirrorFollowsEveryBlockDecisionOfThePrimary) {
  // The mirror holds another rank's shard: fewer KV heads, the same blocks.
  Side primary({2, 4, 8}, 1.f), mirror({2, 2, 8}, -1.f);
  KvJournal journal;
  primary.kv.pool.set_journal(&journal);
  BlockManager blocks(primary.kv.pool, /*prefix_caching=*/true);
  std::mt19937 rng(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<TokenId> prefix = {1, 5, 9, 13, 17, 21, 25, 29};  // two full blocks of 4
  std::map<SeqId, std::vector<TokenId>> live;  // tokens with K/V written
  SeqId next = 0;
  int cow = 0, hits = 0;
  auto sync = [&] {
    for (const KvOp& op : journal) {
      cow += op.kind == KvOpKind::CopyOnWrite;
      mirror.kv.pool.apply(op);
    }
    journal.clear();
    ASSERT_EQ(primary.kv.pool.digest(), mirror.kv.pool.digest());
  };
  for (int step = 0; step < 2000; ++step) {
    const int what = uni(0, 9);
    if (what < 3 || live.empty()) {  // a new sequence, often sharing the prefix
      std::vector<TokenId> tokens = uni(0, 1) ? prefix : std::vector<TokenId>{2};
      for (int i = uni(0, 6); i > 0; --i) tokens.push_back(uni(40, 60));
      const SeqId seq = next++;
      const int64_t cached = blocks.attach_cached_prefix(seq, tokens);
      hits += cached > 0;
      const auto n = static_cast<int64_t>(tokens.size());
      if (!blocks.allocate(seq, cached, n)) {
        blocks.free(seq);
      } else {
        primary.write(seq, tokens, cached, n);
        blocks.commit(seq, tokens, n);
        live[seq] = tokens;
      }
    } else {
      auto it = std::next(live.begin(), uni(0, static_cast<int>(live.size()) - 1));
      const SeqId seq = it->first;
      std::vector<TokenId>& tokens = it->second;
      const auto n = static_cast<int64_t>(tokens.size());
      if (what < 6) {  // grow by one to three tokens
        const int grow = uni(1, 3);
        if (blocks.allocate(seq, n, n + grow)) {
          for (int i = 0; i < grow; ++i) tokens.push_back(uni(40, 60));
          primary.write(seq, tokens, n, n + grow);
          blocks.commit(seq, tokens, n + grow);
        }
      } else if (what < 8 && n > 1) {  // roll back like rejected drafts
        const int r = uni(1, static_cast<int>(std::min<int64_t>(3, n - 1)));
        blocks.rollback(seq, n, r);
        tokens.resize(static_cast<size_t>(n - r));
      } else {
        blocks.free(seq);
        live.erase(it);
      }
    }
    sync();
    if (HasFatalFailure()) return;
    for (const auto& [seq, tokens] : live) {
      ASSERT_EQ(std::vector<BlockId>(mirror.kv.pool.block_table(seq)->blocks().begin(),
                                     mirror.kv.pool.block_table(seq)->blocks().end()),
                std::vector<BlockId>(primary.kv.pool.block_table(seq)->blocks().begin(),
                                     primary.kv.pool.block_table(seq)->blocks().end()));
    }
  }
  EXPECT_GT(hits, 50);
  EXPECT_GT(cow, 10);
  for (const auto& [seq, tokens] : live) blocks.free(seq);
  blocks.clear_prefix_cache();
  sync();
  EXPECT_EQ(mirror.kv.pool.n_free_blocks(), mirror.kv.pool.n_blocks());
}

// Copy-on-write copies the mirror's own K/V: after the copy both sides read their own values
// through the new block.
TEST(KvJournal, CopyOnWriteCopiesTheMirrorsOwnRows) {
  Side primary({1, 2, 4}, 1.f), mirror({1, 1, 4}, -1.f);
  KvJournal journal;
  primary.kv.pool.set_journal(&journal);
  BlockManager blocks(primary.kv.pool, true);
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6, 7, 8};  // two full blocks
  ASSERT_TRUE(blocks.allocate(0, 0, 8));
  for (const KvOp& op : journal) mirror.kv.pool.apply(op);
  journal.clear();
  primary.write(0, tokens, 0, 8);
  mirror.write(0, tokens, 0, 8);
  blocks.commit(0, tokens, 8);
  const int64_t cached = blocks.attach_cached_prefix(1, tokens);  // all but the last token
  ASSERT_EQ(cached, 7);
  ASSERT_TRUE(blocks.allocate(1, cached, 8));  // the last block is shared: copied first
  for (const KvOp& op : journal) mirror.kv.pool.apply(op);
  EXPECT_TRUE(std::any_of(journal.begin(), journal.end(), [](const KvOp& op) { return op.kind == KvOpKind::CopyOnWrite; }));
  EXPECT_EQ(primary.kv.pool.digest(), mirror.kv.pool.digest());
  primary.expect_rows(1, tokens, 7);
  mirror.expect_rows(1, tokens, 7);
}

TEST(KvJournal, AMirrorThatDisagreesIsRefused) {
  HostKv mirror({1, 1, 4}, KvType::F32, 4, 4);
  ASSERT_TRUE(mirror.pool.reserve(3, 4));  // block 0 in use here
  EXPECT_THROW(mirror.pool.apply({KvOpKind::AppendNew, 4, 0, 0}), UsageError);
  EXPECT_THROW(mirror.pool.apply({KvOpKind::ReleaseSeq, 9, -1, 0}), UsageError);
  EXPECT_THROW(mirror.pool.apply({KvOpKind::Truncate, 9, -1, 2}), UsageError);
  EXPECT_THROW(mirror.pool.apply({KvOpKind::CopyOnWrite, 3, 1, 0}), UsageError);  // block 0 is not shared
  EXPECT_NO_THROW(mirror.pool.apply({KvOpKind::AppendNew, 4, 1, 0}));
}

}  // namespace
}  // namespace peregrine
