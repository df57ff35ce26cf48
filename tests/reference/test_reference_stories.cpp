// Validates the reference forward pass itself on a real trained model: greedy decoding of
// stories260K from BOS must reproduce the known output (README.md beside the model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/test_paths.h"
#include "format/llama2c.h"
#include "reference/reference_forward.h"
#include "util/error.h"

namespace peregrine {
namespace {

// The first 40 ids of the known greedy output (../shared/models/stories260K/README.md).
const std::vector<int32_t> kKnownGreedy = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352};

ModelFile stories260k() {
  return read_llama2c(test::shared_file("models/stories260K/stories260K.bin"),
                      test::shared_file("models/stories260K/tok512.bin"));
}

TEST(ReferenceForward, Stories260KGreedyMatchesKnownOutput) {
  ModelFile f = stories260k();
  const std::vector<int32_t> bos = {1};
  EXPECT_EQ(reference_greedy(f, bos, static_cast<int>(kKnownGreedy.size())), kKnownGreedy);
}

TEST(ReferenceForward, EarlierRowsDoNotDependOnLaterTokens) {
  // Causality: the logits of a prefix are the same whatever follows it.
  ModelFile f = stories260k();
  const std::vector<int32_t> a = {1, 403, 407, 261, 378}, b = {1, 403, 407, 99, 12};
  auto la = reference_forward(f, a), lb = reference_forward(f, b);
  ASSERT_EQ(la.size(), 5u);
  ASSERT_EQ(la[0].size(), 512u);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(la[t], lb[t]) << "row " << t;
  EXPECT_NE(la[3], lb[3]);
}

TEST(ReferenceForward, RejectsBadTokens) {
  ModelFile f = stories260k();
  const std::vector<int32_t> out_of_range = {1, 512}, negative = {-1};
  EXPECT_THROW(reference_forward(f, out_of_range), UsageError);
  EXPECT_THROW(reference_forward(f, negative), UsageError);
  EXPECT_THROW(reference_forward(f, std::span<const int32_t>()), UsageError);
}

}  // namespace
}  // namespace peregrine
