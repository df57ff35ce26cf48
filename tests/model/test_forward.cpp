// Forward-pass properties on the real stories260K model: cache vs recompute, batch invariance,
// and rejection of bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu_context.h"
#include "common/forced_isa.h"
#include "common/test_context.h"
#include "model_test_util.h"
#include "util/error.h"

namespace peregrine {
namespace {

class Stories : public ::testing::Test {
 protected:
  // ctest also runs these once per kernel path (PEREGRINE_ISA); a path this CPU lacks skips.
  static void SetUpTestSuite() {
    if (!test::forced_isa_unavailable())
      model_ = std::make_unique<Model>(test::load_stories260k(), test::shared_test_context());
  }
  void SetUp() override { PEREGRINE_SKIP_IF_FORCED_ISA_UNAVAILABLE(); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<Model> Stories::model_;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(Stories, RecomputeWithoutCacheMatchesCachedDecoding) {
  Model& m = *model_;
  const int64_t nv = m.config().n_vocab;
  KvCache cached = m.make_kv_cache(KvType::F32, 8, 16);
  KvCache fresh = m.make_kv_cache(KvType::F32, 8, 16);
  std::vector<int32_t> prefix = {1};
  std::vector<float> logits, logits_fresh;
  for (int pos = 0; pos < 48; ++pos) {
    ASSERT_TRUE(cached.pool().reserve(0, pos + 1));
    Batch step;
    step.add(prefix.back(), pos, 0, true);
    m.forward(step, cached, logits);
    ASSERT_EQ(logits.size(), size_t(nv));

    // The whole prefix into a freshly cleared sequence, in one call.
    fresh.pool().release(3);
    ASSERT_TRUE(fresh.pool().reserve(3, pos + 1));
    Batch all;
    for (int p = 0; p <= pos; ++p) all.add(prefix[size_t(p)], p, 3, p == pos);
    m.forward(all, fresh, logits_fresh);
    ASSERT_EQ(logits_fresh.size(), size_t(nv));
    ASSERT_EQ(test::argmax(logits), test::argmax(logits_fresh)) << "step " << pos;
    ASSERT_TRUE(same_bits(logits, logits_fresh)) << "step " << pos;
    prefix.push_back(test::argmax(logits));
  }
}

TEST_F(Stories, MixedBatchIsBitIdenticalToEachSequenceAlone) {
  Model& m = *model_;
  const int64_t nv = m.config().n_vocab;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(nv - 1));
  // Three sequences of different lengths.
  std::vector<std::vector<int32_t>> seqs = {std::vector<int32_t>(9), std::vector<int32_t>(5), std::vector<int32_t>(3)};
  for (auto& s : seqs)
    for (auto& t : s) t = tok(rng);

  // Alone: one token per call, logits for every position.
  std::vector<std::vector<std::vector<float>>> alone(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    KvCache kv = m.make_kv_cache(KvType::F16, 4, 4);
    std::vector<float> logits;
    for (size_t p = 0; p < seqs[s].size(); ++p) {
      ASSERT_TRUE(kv.pool().reserve(0, int64_t(p) + 1));
      Batch b;
      b.add(seqs[s][p], int32_t(p), 0, true);
      m.forward(b, kv, logits);
      alone[s].push_back(logits);
    }
  }

  // Mixed: prompt chunks and single decode tokens of all three in each call, sequence ids that
  // differ from the solo runs, and a block size that splits chunks across blocks.
  struct Row { size_t seq; int32_t pos; };
  const std::vector<std::vector<Row>> calls = {
      {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {2, 0}},
      {{2, 1}, {0, 4}, {0, 5}, {0, 6}, {1, 3}},
      {{1, 4}, {0, 7}, {2, 2}, {0, 8}},
  };
  KvCache kv = m.make_kv_cache(KvType::F16, 16, 3);
  const SeqId ids[] = {11, 5, 7};
  std::vector<float> logits;
  size_t checked = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    Batch b;
    for (const Row& r : calls[c]) {
      ASSERT_TRUE(kv.pool().reserve(ids[r.seq], r.pos + 1));
      // Every row of sequence 0's chunk in call 0 except its last skips logits.
      const bool want = !(c == 0 && r.seq == 0 && r.pos < 3);
      b.add(seqs[r.seq][size_t(r.pos)], r.pos, ids[r.seq], want);
    }
    m.forward(b, kv, logits);
    size_t row = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      if (!b.want_logits[i]) continue;
      const Row& r = calls[c][i];
      std::span<const float> got(logits.data() + row * nv, size_t(nv));
      ASSERT_TRUE(same_bits(got, alone[r.seq][size_t(r.pos)])) << "call " << c << " row " << i;
      ++row;
      ++checked;
    }
    ASSERT_EQ(logits.size(), row * size_t(nv));
  }
  EXPECT_EQ(checked, 14u);
}

TEST_F(Stories, BadInputsThrowUsageErrorAndChangeNothing) {
  Model& m = *model_;
  KvCache kv = m.make_kv_cache(KvType::F32, 40, 16);
  ASSERT_TRUE(kv.pool().reserve(0, 4));
  std::vector<float> logits;
  Batch ok;
  ok.add(1, 0, 0, true);
  ok.add(5, 1, 0, true);
  m.forward(ok, kv, logits);
  uint64_t digest = kv.pool().digest();

  auto expect_usage = [&](Batch b, const char* what) {
    EXPECT_THROW(m.forward(b, kv, logits), UsageError) << what;
    EXPECT_EQ(kv.pool().digest(), digest) << what;
  };
  Batch b;
  b.add(-1, 2, 0, true);
  expect_usage(b, "negative token");
  b.clear();
  b.add(int32_t(m.config().n_vocab), 2, 0, true);
  expect_usage(b, "token == n_vocab");
  b.clear();
  b.add(1, 16, 0, true);  // the reservation is one block of 16 positions
  expect_usage(b, "position past the reservation");
  b.clear();
  b.add(1, 0, 9, true);
  expect_usage(b, "unknown sequence");
  b.clear();
  b.add(1, 2, 0, true);
  b.add(1, 2, 0, true);
  expect_usage(b, "repeated position");
  // (A first position past the cached ones is the caller's to avoid: the cache keeps no length,
  // the engine's Sequence::n_computed is the record.)
  b.clear();
  b.add(1, 2, 0, true);
  b.add(1, 1, 0, true);
  expect_usage(b, "positions out of order");
  b.clear();
  b.add(1, 2, 0, true);
  b.positions.push_back(3);
  expect_usage(b, "ragged batch vectors");

  ASSERT_TRUE(kv.pool().reserve(1, 520));
  digest = kv.pool().digest();
  b.clear();
  for (int p = 0; p < 513; ++p) b.add(1, p, 1, false);
  expect_usage(b, "position >= context length");

  ModelConfig other = m.config();
  other.n_kv_heads = 8;
  KvCache wrong(m.context().allocate_kv({other.kv_shape(), KvType::F32, 4, 16}));
  ASSERT_TRUE(wrong.pool().reserve(0, 1));
  b.clear();
  b.add(1, 0, 0, true);
  EXPECT_THROW(m.forward(b, wrong, logits), UsageError);

  // An empty batch is fine and returns no logits.
  b.clear();
  m.forward(b, kv, logits);
  EXPECT_TRUE(logits.empty());
}

TEST(ModelLoad, RejectsMissingOrMisshapedTensors) {
  const ModelFile good = test::load_stories260k();
  auto expect_format_error = [](ModelFile f, const std::string& needle) {
    try {
      Model m(std::move(f), test::shared_test_context());
      ADD_FAILURE() << "no FormatError; expected one mentioning " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("stories260K.bin"), std::string::npos) << e.what();
    }
  };
  {
    ModelFile f = good;
    std::erase_if(f.tensors, [](const TensorView& t) { return t.name == "output_norm.weight"; });
    expect_format_error(std::move(f), "output_norm.weight");
  }
  {
    ModelFile f = good;
    for (auto& t : f.tensors)
      if (t.name == "blk.3.attn_k.weight") t.shape = {32, 64};
    expect_format_error(std::move(f), "blk.3.attn_k.weight");
  }
  {
    ModelFile f = good;
    for (auto& t : f.tensors)
      if (t.name == "blk.1.ffn_down.weight") t.type = TensorType::Q8_0;  // 172-long rows: no whole blocks
    expect_format_error(std::move(f), "blk.1.ffn_down.weight");
  }
  {
    ModelFile f = good;
    for (auto& t : f.tensors)
      if (t.name == "blk.0.ffn_up.weight") t.type = TensorType::F16;  // data size now wrong
    expect_format_error(std::move(f), "blk.0.ffn_up.weight");
  }
}

}  // namespace
}  // namespace peregrine
