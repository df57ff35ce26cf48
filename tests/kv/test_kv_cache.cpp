#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/config.h"
#include "kv/kv_cache.h"
#include "util/error.h"

namespace peregrine {
namespace {

ModelConfig tiny_config(int64_t layers = 2, int64_t kv_heads = 2, int64_t head_dim = 4) {
  ModelConfig c;
  c.n_layers = layers;
  c.n_heads = kv_heads * 2;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.dim = c.n_heads * head_dim;
  return c;
}

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

TEST(KvCache, SizesAndBytes) {
  KvCache kv(tiny_config(3, 2, 8).kv_shape(), KvType::F16, 10, 4);
  EXPECT_EQ(kv.n_blocks(), 10);
  EXPECT_EQ(kv.block_size(), 4);
  EXPECT_EQ(kv.n_free_blocks(), 10);
  // 2 (K,V) * 3 layers * 10 blocks * 4 slots * 2 heads * 8 dims * 2 bytes
  EXPECT_EQ(kv.bytes(), size_t{2 * 3 * 10 * 4 * 2 * 8 * 2});
}

TEST(KvCache, RejectsBadSizes) {
  EXPECT_THROW(KvCache(tiny_config().kv_shape(), KvType::F32, 0, 16), UsageError);
  EXPECT_THROW(KvCache(tiny_config().kv_shape(), KvType::F32, 4, 0), UsageError);
  EXPECT_THROW(KvCache(tiny_config().kv_shape(), KvType::F32, int64_t{1} << 40, 16), UsageError);
}

TEST(KvCache, ReserveReleaseTruncateAccounting) {
  KvCache kv(tiny_config().kv_shape(), KvType::F32, 8, 4);
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

TEST(KvCache, OutOfBlocksLeavesStateUnchanged) {
  KvCache kv(tiny_config().kv_shape(), KvType::F32, 4, 4);
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

TEST(KvCache, RowsAndRoundTrip) {
  const ModelConfig cfg = tiny_config(2, 2, 4);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16}) {
    KvCache kv(cfg.kv_shape(), type, 6, 3);
    ASSERT_TRUE(kv.reserve(0, 3));
    ASSERT_TRUE(kv.reserve(1, 7));
    EXPECT_THROW(kv.row_of(1, 9), UsageError);
    EXPECT_THROW(kv.row_of(5, 0), UsageError);
    EXPECT_THROW(kv.row_of(1, -1), UsageError);
    const BlockTable& t = *kv.block_table(1);
    EXPECT_EQ(kv.row_of(1, 4), int64_t{t[1]} * 3 + 1);

    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<float> k(8), v(8), k2(8), v2(8);
    for (auto& e : k) e = dist(rng);
    for (auto& e : v) e = dist(rng);
    const int64_t row = kv.row_of(1, 5);
    kv.write_row(1, row, k, v);
    kv.read_row(1, row, k2, v2);
    const float tol = type == KvType::F32 ? 0.f : type == KvType::F16 ? 2e-3f : 2e-2f;
    for (size_t i = 0; i < k.size(); ++i) {
      EXPECT_NEAR(k2[i], k[i], tol * std::fabs(k[i]));
      EXPECT_NEAR(v2[i], v[i], tol * std::fabs(v[i]));
    }
    // Layer 0 at the same row is untouched.
    kv.read_row(0, row, k2, v2);
    EXPECT_EQ(k2[0], 0.f);
    EXPECT_THROW(kv.write_row(2, row, k, v), UsageError);
    EXPECT_THROW(kv.write_row(0, 6 * 3, k, v), UsageError);
  }
}

// A block exported from one cache and imported into another (disaggregated prefill/decode) reads
// back the same K/V in every layer, for every cache type; the other blocks are untouched.
TEST(KvCache, BlockExportImportRoundTrip) {
  const ModelConfig cfg = tiny_config(3, 2, 32);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    KvCache from(cfg.kv_shape(), type, 4, 3), to(cfg.kv_shape(), type, 4, 3);
    ASSERT_TRUE(from.reserve(0, 6));
    const BlockId b = (*from.block_table(0))[1];
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<float> k(64), v(64), k2(64), v2(64), k3(64), v3(64);
    for (int64_t layer = 0; layer < 3; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        for (auto& e : k) e = dist(rng);
        for (auto& e : v) e = dist(rng);
        from.write_row(layer, int64_t{b} * 3 + slot, k, v);
      }
    }
    std::vector<std::byte> bytes(from.block_bytes());
    from.export_block(b, bytes);
    const BlockId dst = 2;
    to.import_block(dst, bytes);
    for (int64_t layer = 0; layer < 3; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        from.read_row(layer, int64_t{b} * 3 + slot, k2, v2);
        to.read_row(layer, int64_t{dst} * 3 + slot, k3, v3);
        EXPECT_EQ(k2, k3) << kv_type_name(type) << " layer " << layer << " slot " << slot;
        EXPECT_EQ(v2, v3);
        EXPECT_NE(k3[0], 0.f);
        to.read_row(layer, 0, k3, v3);  // block 0 was not written
        EXPECT_EQ(k3[0], 0.f);
      }
    }
    EXPECT_THROW(to.import_block(dst, std::span<const std::byte>(bytes).first(bytes.size() - 1)), UsageError);
    EXPECT_THROW(from.export_block(4, bytes), UsageError);
  }
}

// Pools of tensor-parallel ranks move K/V by head ranges: heads [1, 3) of a 4-head cache land in heads [0, 2) of a 2-head cache, and
// head 3 in its head 1, for every cache type; nothing else moves.
TEST(KvCache, HeadRangesMoveBetweenCachesOfDifferentHeadCounts) {
  const KvShape whole{2, 4, 32}, half{2, 2, 32};
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    KvCache from(whole, type, 4, 3), to(half, type, 4, 3);
    const BlockId b = 3;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<float> k(128), v(128), k2(128), v2(128), k3(64), v3(64);
    for (int64_t layer = 0; layer < 2; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        for (auto& e : k) e = dist(rng);
        for (auto& e : v) e = dist(rng);
        from.write_row(layer, int64_t{b} * 3 + slot, k, v);
      }
    }
    ASSERT_EQ(from.heads_bytes(1, 3), to.heads_bytes(0, 2));
    std::vector<std::byte> bytes(from.heads_bytes(1, 3));
    from.export_heads(b, 1, 3, bytes);
    to.import_heads(1, 0, 2, bytes);
    for (int64_t layer = 0; layer < 2; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        from.read_row(layer, int64_t{b} * 3 + slot, k2, v2);
        to.read_row(layer, 3 + slot, k3, v3);
        for (size_t i = 0; i < 64; ++i) {
          ASSERT_EQ(k3[i], k2[32 + i]) << kv_type_name(type) << " layer " << layer << " slot " << slot;
          ASSERT_EQ(v3[i], v2[32 + i]);
        }
      }
    }
    // Head 3 alone into head 1 of block 2: head 0 there stays unwritten.
    bytes.resize(from.heads_bytes(3, 4));
    from.export_heads(b, 3, 4, bytes);
    to.import_heads(2, 1, 2, bytes);
    from.read_row(1, int64_t{b} * 3 + 2, k2, v2);
    to.read_row(1, 2 * 3 + 2, k3, v3);
    for (size_t i = 0; i < 32; ++i) {
      EXPECT_EQ(k3[i], 0.f);
      EXPECT_EQ(k3[32 + i], k2[96 + i]) << kv_type_name(type);
      EXPECT_EQ(v3[32 + i], v2[96 + i]);
    }
    EXPECT_THROW(to.import_heads(2, 1, 3, bytes), UsageError);  // the cache has 2 heads
    EXPECT_THROW(from.export_heads(b, 2, 2, bytes), UsageError);
  }
}

}  // namespace
}  // namespace peregrine
