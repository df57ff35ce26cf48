// stories260K, a real trained model: greedy decoding must reproduce the known output exactly.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu_context.h"
#include "common/test_context.h"
#include "format/convert.h"
#include "format/gguf.h"
#include "model_test_util.h"

namespace peregrine {
namespace {

// From ../shared/models/stories260K/README.md: greedy from BOS, float32, 256 steps.
const std::vector<int32_t> kGolden = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408,
    419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426,
    338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419,
    357, 336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267, 265, 282, 295, 433, 426, 436, 317, 286,
    296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426, 338, 336, 432, 313, 442,
    391, 267, 337, 335, 364, 420, 268, 388, 432, 398, 359, 280, 303, 439, 413, 272, 417, 264, 312, 426, 436, 13,
    438, 310, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426, 338, 336,
    432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 317, 426, 359, 279, 292, 416, 439, 413, 409, 416, 327, 263,
    415, 294, 267, 400, 426, 436, 13,  438, 310, 279, 292, 416, 439, 413, 391, 267, 281, 421, 427, 311, 357, 432,
    384, 358, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 357, 426, 359, 279, 292, 416, 439, 413, 409,
    416, 327, 263, 415, 294, 267, 400, 426, 436, 320, 285, 357, 336, 432, 313, 455, 289, 439, 413, 263, 304, 420,
    422, 432, 317, 426, 410, 448, 411, 280, 303, 281, 421, 427, 364, 426};

size_t matching_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST(Golden, Stories260kLlama2cF32) {
  ASSERT_EQ(kGolden.size(), 256u);
  Model model(test::load_stories260k(), test::shared_test_context());
  EXPECT_EQ(model.config().n_kv_heads, 4);
  EXPECT_TRUE(model.config().tied_output);
  EXPECT_EQ(test::greedy_from_bos(model, KvType::F32, 256), kGolden);
}

TEST(Golden, Stories260kGgufF32) {
  const auto path = test::scratch_dir("model_golden_gguf") / "stories260K.f32.gguf";
  write_gguf_from(test::load_stories260k(), path, TensorType::F32);
  Model model(read_gguf(path), test::shared_test_context());
  EXPECT_EQ(model.config().arch, Arch::Llama);
  EXPECT_EQ(test::greedy_from_bos(model, KvType::F32, 256), kGolden);
}

TEST(Golden, Stories260kF16KvCache) {
  Model model(test::load_stories260k(), test::shared_test_context());
  const auto ids = test::greedy_from_bos(model, KvType::F16, 256);
  const size_t same = matching_prefix(ids, kGolden);
  RecordProperty("f16_kv_matching_prefix", static_cast<int>(same));
  std::printf("f16 KV cache: first %zu of 256 greedy ids match the f32 golden output\n", same);
  // f16 rounding of K/V may flip a near-tie late in the text, but not early.
  EXPECT_GE(same, 64u);
}

TEST(Golden, Stories260kGgufQ8_0StaysClose) {
  // Q8_0 where rows allow (dim 64), F32 for the 172-long ffn_down rows: a mixed-type file.
  const auto path = test::scratch_dir("model_golden_q8") / "stories260K.q8_0.gguf";
  write_gguf_from(test::load_stories260k(), path, TensorType::Q8_0);
  Model model(read_gguf(path), test::shared_test_context());
  bool mixed_q8 = false, mixed_f32 = false;
  for (const auto& t : model.file().tensors) {
    mixed_q8 |= t.type == TensorType::Q8_0;
    mixed_f32 |= t.shape.size() == 2 && t.type == TensorType::F32;
  }
  EXPECT_TRUE(mixed_q8 && mixed_f32);
  const auto ids = test::greedy_from_bos(model, KvType::F32, 64);
  const size_t same = matching_prefix(ids, kGolden);
  std::printf("q8_0 weights: first %zu of 64 greedy ids match the f32 golden output\n", same);
  EXPECT_GE(same, 32u);
}

}  // namespace
}  // namespace peregrine
