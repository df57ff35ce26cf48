// Copy-on-write across the KV seam: the block pool only records the copy a shared block owes
// (BlockPool::pending_copies); the model's forward has the context apply it (copy_kv_blocks)
// before writing. A sequence that shares a cached prefix and then writes into its last block
// computes the bits of the same tokens in a cache of their own, and a mirror pool replaying the
// journal (a tensor- or pipeline-parallel rank) records the same copy for its own storage: the
// digests, the logits and every stored K/V row agree.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu_context.h"
#include "model_test_util.h"

namespace peregrine {
namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Batch batch_of(SeqId seq, const std::vector<TokenId>& tokens, int64_t from) {
  Batch b;
  for (size_t i = static_cast<size_t>(from); i < tokens.size(); ++i) {
    b.add(tokens[i], static_cast<int32_t>(i), seq, i + 1 == tokens.size());
  }
  return b;
}

TEST(KvCopyOnWrite, ASharedBlockIsCopiedBeforeTheWriteOnThePrimaryAndItsMirror) {
  Model m(test::load_stories260k(), shared_cpu_context());
  ExecutionContext& ctx = m.context();
  for (KvType type : {KvType::F16, KvType::Q8_0}) {
    KvCache primary = m.make_kv_cache(type, 8, 4), mirror = m.make_kv_cache(type, 8, 4),
            fresh = m.make_kv_cache(type, 8, 4);
    KvJournal journal;
    primary.pool().set_journal(&journal);
    std::vector<float> logits, mirror_logits;
    // Runs `b` on the primary, and on the mirror after it replayed the primary's decisions.
    const auto run = [&](const Batch& b) {
      m.forward(b, primary, logits);
      for (const KvOp& op : journal) mirror.pool().apply(op);
      journal.clear();
      m.forward(b, mirror, mirror_logits);
      ASSERT_TRUE(same_bits(logits, mirror_logits));
      ASSERT_EQ(primary.pool().digest(), mirror.pool().digest());
    };
    const std::vector<TokenId> first = {1, 50, 60, 70, 80, 90, 100};  // blocks of 4: one full, one partial
    ASSERT_TRUE(primary.pool().reserve(1, 7));
    run(batch_of(1, first, 0));

    // Sequence 2 shares both blocks of sequence 1, then takes other tokens from position 5 on:
    // the block holding positions 4-7 is shared, so it is swapped for a fresh one that owes a copy.
    const std::vector<BlockId> shared(primary.pool().block_table(1)->blocks().begin(),
                                      primary.pool().block_table(1)->blocks().end());
    for (BlockId b : shared) primary.pool().append_shared_block(2, b);
    ASSERT_TRUE(primary.pool().make_writable(2, 5));
    const BlockId own = (*primary.pool().block_table(2))[1];
    ASSERT_NE(own, shared[1]);
    ASSERT_EQ(primary.pool().pending_copies().size(), 1u);
    EXPECT_EQ(primary.pool().pending_copies()[0], (BlockCopy{shared[1], own}));
    const std::vector<TokenId> second = {1, 50, 60, 70, 80, 200, 210};
    run(batch_of(2, second, 5));
    EXPECT_TRUE(primary.pool().pending_copies().empty());  // applied by the forward
    EXPECT_TRUE(mirror.pool().pending_copies().empty());
    const std::vector<float> shared_logits = logits;

    // The same tokens in a cache of their own: position 4's K/V came over with the copy.
    ASSERT_TRUE(fresh.pool().reserve(2, 7));
    std::vector<float> alone;
    m.forward(batch_of(2, second, 0), fresh, alone);
    EXPECT_TRUE(same_bits(shared_logits, alone)) << kv_type_name(type);

    // Every row either sequence holds has the same bits on the primary and the mirror, and
    // sequence 1's own block still holds its tokens (position 5: token 90, not 200).
    const auto width = static_cast<size_t>(m.kv_shape().n_kv_heads * m.kv_shape().head_dim);
    std::vector<float> k(width), v(width), k2(width), v2(width);
    for (SeqId seq : {1, 2}) {
      for (int64_t p = 0; p < 7; ++p) {
        for (int64_t layer = 0; layer < m.kv_shape().n_layers; ++layer) {
          const int64_t row = primary.pool().row_of(seq, p);
          ctx.read_kv_row(primary.storage(), layer, row, k, v);
          ctx.read_kv_row(mirror.storage(), layer, row, k2, v2);
          ASSERT_TRUE(same_bits(k, k2) && same_bits(v, v2)) << "seq " << seq << " pos " << p;
        }
      }
    }
    ctx.read_kv_row(primary.storage(), 0, primary.pool().row_of(1, 5), k, v);
    ctx.read_kv_row(primary.storage(), 0, primary.pool().row_of(2, 5), k2, v2);
    EXPECT_FALSE(same_bits(k, k2));
  }
}

}  // namespace
}  // namespace peregrine
