// HostKvStorage (kv/host_kv_storage.h): the K/V of host contexts in one buffer. Rows round-trip
// in every type, blocks and head ranges move between storages, and the sizes are those of the spec.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/host_kv.h"
#include "kv/host_kv_storage.h"
#include "model/config.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

ModelConfig tiny_config(int64_t layers = 2, int64_t kv_heads = 2, int64_t head_dim = 4) {
  ModelConfig c;
  c.n_layers = layers;
  c.n_heads = kv_heads * 2;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.dim = c.n_heads * head_dim;
  return c;
}

TEST(HostKvStorage, SizesAndBytes) {
  HostKv kv(tiny_config(3, 2, 8).kv_shape(), KvType::F16, 10, 4);
  EXPECT_EQ(kv.storage.n_blocks(), 10);
  EXPECT_EQ(kv.storage.block_size(), 4);
  // 2 (K,V) * 3 layers * 10 blocks * 4 slots * 2 heads * 8 dims * 2 bytes
  EXPECT_EQ(kv.storage.bytes(), size_t{2 * 3 * 10 * 4 * 2 * 8 * 2});
  EXPECT_GE(HostKvStorage::buffer_bytes(kv.storage.spec()), kv.storage.bytes());
}

TEST(HostKvStorage, RejectsBadSpecsAndShortMemory) {
  const KvShape shape = tiny_config().kv_shape();
  EXPECT_THROW(check_kv_spec({shape, KvType::F32, 0, 16}), UsageError);
  EXPECT_THROW(check_kv_spec({shape, KvType::F32, 4, 0}), UsageError);
  EXPECT_THROW(check_kv_spec({shape, KvType::F32, int64_t{1} << 40, 16}), UsageError);
  EXPECT_THROW(check_kv_spec({KvShape{0, 2, 4}, KvType::F32, 4, 16}), UsageError);
  const KvStorageSpec spec{shape, KvType::F32, 4, 4};
  EXPECT_THROW(HostKvStorage(spec, host_buffer(HostKvStorage::buffer_bytes(spec) - 1)), UsageError);
}

TEST(HostKvStorage, RowsAndRoundTrip) {
  const ModelConfig cfg = tiny_config(2, 2, 4);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16}) {
    HostKv kv(cfg.kv_shape(), type, 6, 3);
    ASSERT_TRUE(kv.pool.reserve(0, 3));
    ASSERT_TRUE(kv.pool.reserve(1, 7));
    EXPECT_THROW(kv.pool.row_of(1, 9), UsageError);
    EXPECT_THROW(kv.pool.row_of(5, 0), UsageError);
    EXPECT_THROW(kv.pool.row_of(1, -1), UsageError);
    const BlockTable& t = *kv.pool.block_table(1);
    EXPECT_EQ(kv.pool.row_of(1, 4), int64_t{t[1]} * 3 + 1);

    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<float> k(8), v(8), k2(8), v2(8);
    for (auto& e : k) e = dist(rng);
    for (auto& e : v) e = dist(rng);
    const int64_t row = kv.pool.row_of(1, 5);
    kv.storage.write_row(1, row, k, v);
    kv.storage.read_row(1, row, k2, v2);
    const float tol = type == KvType::F32 ? 0.f : type == KvType::F16 ? 2e-3f : 2e-2f;
    for (size_t i = 0; i < k.size(); ++i) {
      EXPECT_NEAR(k2[i], k[i], tol * std::fabs(k[i]));
      EXPECT_NEAR(v2[i], v[i], tol * std::fabs(v[i]));
    }
    // Layer 0 at the same row is untouched.
    kv.storage.read_row(0, row, k2, v2);
    EXPECT_EQ(k2[0], 0.f);
    EXPECT_THROW(kv.storage.write_row(2, row, k, v), UsageError);
    EXPECT_THROW(kv.storage.write_row(0, 6 * 3, k, v), UsageError);
  }
}

// A block exported from one cache and imported into another (disaggregated prefill/decode) reads
// back the same K/V in every layer, for every cache type; the other blocks are untouched.
TEST(HostKvStorage, BlockExportImportRoundTrip) {
  const ModelConfig cfg = tiny_config(3, 2, 32);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    HostKv from(cfg.kv_shape(), type, 4, 3), to(cfg.kv_shape(), type, 4, 3);
    ASSERT_TRUE(from.pool.reserve(0, 6));
    const BlockId b = (*from.pool.block_table(0))[1];
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<float> k(64), v(64), k2(64), v2(64), k3(64), v3(64);
    for (int64_t layer = 0; layer < 3; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        for (auto& e : k) e = dist(rng);
        for (auto& e : v) e = dist(rng);
        from.storage.write_row(layer, int64_t{b} * 3 + slot, k, v);
      }
    }
    std::vector<std::byte> bytes(from.storage.block_bytes());
    from.storage.export_heads(b, 0, 2, bytes);
    const BlockId dst = 2;
    to.storage.import_heads(dst, 0, 2, bytes);
    for (int64_t layer = 0; layer < 3; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        from.storage.read_row(layer, int64_t{b} * 3 + slot, k2, v2);
        to.storage.read_row(layer, int64_t{dst} * 3 + slot, k3, v3);
        EXPECT_EQ(k2, k3) << kv_type_name(type) << " layer " << layer << " slot " << slot;
        EXPECT_EQ(v2, v3);
        EXPECT_NE(k3[0], 0.f);
        to.storage.read_row(layer, 0, k3, v3);  // block 0 was not written
        EXPECT_EQ(k3[0], 0.f);
      }
    }
    EXPECT_THROW(to.storage.import_heads(dst, 0, 2, std::span<const std::byte>(bytes).first(bytes.size() - 1)),
                 UsageError);
    EXPECT_THROW(from.storage.export_heads(4, 0, 2, bytes), UsageError);
  }
}

// Pools of tensor-parallel ranks move K/V by head ranges: heads [1, 3) of a 4-head cache land in heads [0, 2) of a
// 2-head cache, and head 3 in its head 1, for every cache type; nothing else moves.
TEST(HostKvStorage, HeadRangesMoveBetweenCachesOfDifferentHeadCounts) {
  const KvShape whole{2, 4, 32}, half{2, 2, 32};
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    HostKv from(whole, type, 4, 3), to(half, type, 4, 3);
    const BlockId b = 3;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    std::vector<float> k(128), v(128), k2(128), v2(128), k3(64), v3(64);
    for (int64_t layer = 0; layer < 2; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        for (auto& e : k) e = dist(rng);
        for (auto& e : v) e = dist(rng);
        from.storage.write_row(layer, int64_t{b} * 3 + slot, k, v);
      }
    }
    ASSERT_EQ(from.storage.heads_bytes(1, 3), to.storage.heads_bytes(0, 2));
    std::vector<std::byte> bytes(from.storage.heads_bytes(1, 3));
    from.storage.export_heads(b, 1, 3, bytes);
    to.storage.import_heads(1, 0, 2, bytes);
    for (int64_t layer = 0; layer < 2; ++layer) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        from.storage.read_row(layer, int64_t{b} * 3 + slot, k2, v2);
        to.storage.read_row(layer, 3 + slot, k3, v3);
        for (size_t i = 0; i < 64; ++i) {
          ASSERT_EQ(k3[i], k2[32 + i]) << kv_type_name(type) << " layer " << layer << " slot " << slot;
          ASSERT_EQ(v3[i], v2[32 + i]);
        }
      }
    }
    // Head 3 alone into head 1 of block 2: head 0 there stays unwritten.
    bytes.resize(from.storage.heads_bytes(3, 4));
    from.storage.export_heads(b, 3, 4, bytes);
    to.storage.import_heads(2, 1, 2, bytes);
    from.storage.read_row(1, int64_t{b} * 3 + 2, k2, v2);
    to.storage.read_row(1, 2 * 3 + 2, k3, v3);
    for (size_t i = 0; i < 32; ++i) {
      EXPECT_EQ(k3[i], 0.f);
      EXPECT_EQ(k3[32 + i], k2[96 + i]) << kv_type_name(type);
      EXPECT_EQ(v3[32 + i], v2[96 + i]);
    }
    EXPECT_THROW(to.storage.import_heads(2, 1, 3, bytes), UsageError);  // the cache has 2 heads
    EXPECT_THROW(from.storage.export_heads(b, 2, 2, bytes), UsageError);
  }
}

}  // namespace
}  // namespace peregrine
