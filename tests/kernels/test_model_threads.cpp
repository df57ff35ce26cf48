// The forward pass gives bit-identical logits for any thread count (matmul rows and attention
// heads are split among threads, never one reduction), on the active ISA path.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/test_paths.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "synth/synthetic.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::vector<float> run(const std::filesystem::path& path, int threads) {
  Model m(open_model_file(path), threads);
  EXPECT_EQ(m.n_threads(), threads);
  KvCache kv(m.config(), KvType::F16, 16, 4);
  std::vector<float> all, logits;
  // A prompt chunk of sequence 0 mixed with sequence 1, then a decode step of both.
  Batch b;
  for (int i = 0; i < 6; ++i) b.add((7 * i + 3) % static_cast<int>(m.config().n_vocab), i, 0, true);
  for (int i = 0; i < 3; ++i) b.add((5 * i + 1) % static_cast<int>(m.config().n_vocab), i, 1, true);
  EXPECT_TRUE(kv.reserve(0, 8));
  EXPECT_TRUE(kv.reserve(1, 8));
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
  const auto spec = synthetic_preset("tiny-llama");
  ASSERT_TRUE(spec.has_value());
  const auto dir = test::scratch_dir("kernels_model_threads");
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
  EXPECT_THROW(Model(open_model_file(dir / "q8_0.gguf"), 0), UsageError);
}

}  // namespace
}  // namespace peregrine
