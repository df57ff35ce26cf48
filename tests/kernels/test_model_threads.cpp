// The forward pass gives bit-identical logits for any thread count (matmul rows and attention
// heads are split among threads, never one reduction), on the active ISA path; ctest runs these
// once per path (PEREGRINE_ISA, tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_context.h"
#include "common/forced_isa.h"
#include "common/test_paths.h"
#include "kernels/attention.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "synth/synthetic.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::vector<float> run(const std::filesystem::path& path, int threads) {
  Model m(open_model_file(path), std::make_shared<CpuContext>(threads));
  EXPECT_EQ(m.context().n_threads(), threads);
  KvCache kv = m.make_kv_cache(KvType::F16, 16, 4);
  std::vector<float> all, logits;
  // A prompt chunk of sequence 0 mixed with sequence 1, then a decode step of both.
  Batch b;
  for (int i = 0; i < 6; ++i) b.add((7 * i + 3) % static_cast<int>(m.config().n_vocab), i, 0, true);
  for (int i = 0; i < 3; ++i) b.add((5 * i + 1) % static_cast<int>(m.config().n_vocab), i, 1, true);
  EXPECT_TRUE(kv.pool().reserve(0, 8));
  EXPECT_TRUE(kv.pool().reserve(1, 8));
  m.forward(b, kv, logits);
  all.insert(all.end(), logits.begin(), logits.end());
  b.clear();
  b.add(11, 6, 0, true);
  b.add(12, 3, 1, true);
  m.forward(b, kv, logits);
  all.insert(all.end(), logits.begin(), logits.end());
  return all;
}

TEST(ModelThreads, LogitsBitIdenticalForAnyThreadCount) {
  PEREGRINE_SKIP_IF_FORCED_ISA_UNAVAILABLE();
  std::printf("[ kernel path: %s ]\n", std::string(isa_name(active_isa())).c_str());
  const auto spec = synthetic_preset("tiny-llama");
  ASSERT_TRUE(spec.has_value());
  const auto dir = test::scratch_dir("kernels_model_threads_" + test::forced_isa_run_name());
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::F16}) {
    const auto path = dir / (std::string(tensor_type_name(type)) + ".gguf");
    write_synthetic_gguf(*spec, type, 3, path);
    const auto one = run(path, 1);
    ASSERT_FALSE(one.empty());
    for (int threads : {2, 3}) {
      const auto many = run(path, threads);
      ASSERT_EQ(one.size(), many.size());
      EXPECT_EQ(0, std::memcmp(one.data(), many.data(), sizeof(float) * one.size()))
          << tensor_type_name(type) << " " << threads << " threads";
    }
  }
  EXPECT_THROW(CpuContext(0), UsageError);
}

// A decode step over a context longer than one attention segment: alone, a single token's keys
// are split among threads (Flash-Decoding); batched with another sequence's prompt chunk, each
// (token, KV head) is one task. The token's logits must be the same bits in every case.
std::vector<float> long_context_decode(const std::filesystem::path& path, int threads, bool with_other) {
  Model m(open_model_file(path), std::make_shared<CpuContext>(threads));
  const int64_t n_prompt = kAttentionSegment + 37;  // two segments, the second ragged
  EXPECT_LT(n_prompt + 1, m.config().context_length);
  KvCache kv = m.make_kv_cache(KvType::F16, 64, 16);
  EXPECT_TRUE(kv.pool().reserve(0, n_prompt + 1));
  EXPECT_TRUE(kv.pool().reserve(1, 16));
  std::vector<float> logits;
  Batch b;
  for (int64_t i = 0; i < n_prompt; ++i)
    b.add(static_cast<TokenId>((13 * i + 5) % m.config().n_vocab), static_cast<int32_t>(i), 0, false);
  m.forward(b, kv, logits);
  b.clear();
  b.add(42, static_cast<int32_t>(n_prompt), 0, true);
  if (with_other) {
    for (int i = 0; i < 12; ++i) b.add((3 * i + 2) % static_cast<int>(m.config().n_vocab), i, 1, false);
  }
  m.forward(b, kv, logits);
  return logits;
}

TEST(ModelThreads, FlashDecodingSplitGivesTheSameBits) {
  PEREGRINE_SKIP_IF_FORCED_ISA_UNAVAILABLE();
  const auto spec = synthetic_preset("tiny-llama3");  // MQA: one KV head, so decode alone splits
  ASSERT_TRUE(spec.has_value());
  const auto path = test::scratch_dir("kernels_model_flash_" + test::forced_isa_run_name()) / "q8_0.gguf";
  write_synthetic_gguf(*spec, TensorType::Q8_0, 5, path);
  const auto ref = long_context_decode(path, 1, false);
  ASSERT_FALSE(ref.empty());
  for (auto [threads, other] : {std::pair{3, false}, std::pair{2, true}, std::pair{3, true}}) {
    const auto got = long_context_decode(path, threads, other);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), sizeof(float) * ref.size()))
        << threads << " threads, batched with another sequence: " << other;
  }
}

}  // namespace
}  // namespace peregrine
