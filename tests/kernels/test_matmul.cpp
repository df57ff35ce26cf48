#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/matmul.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::random_vec;

TEST(Dot, MatchesDoubleReferenceOnRaggedSizes) {
  for (int64_t n : {1, 3, 7, 8, 9, 31, 64, 100, 257}) {
    auto a = random_vec(static_cast<size_t>(n), 1 + static_cast<uint32_t>(n));
    auto b = random_vec(static_cast<size_t>(n), 100 + static_cast<uint32_t>(n));
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += double(a[i]) * double(b[i]);
    EXPECT_NEAR(dot(a.data(), b.data(), n), ref, 1e-5 * (1 + std::sqrt(double(n)))) << n;
  }
}

class MatmulAllTypes : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulAllTypes, MatchesPlainLoopAndIsBatchInvariant) {
  const TensorType type = GetParam();
  const int64_t block = tensor_type_info(type).block_elems;
  // Ragged row counts and token counts; row lengths ragged where the type allows.
  const std::vector<int64_t> n_ins = block == 1 ? std::vector<int64_t>{1, 13, 67} : std::vector<int64_t>{block, 3 * block};
  for (int64_t n_in : n_ins) {
    for (int64_t n_out : {1, 5, 19}) {
      for (int64_t n_tok : {1, 3, 6}) {
        auto w = make_weight(type, n_in, n_out, static_cast<uint32_t>(n_in * 31 + n_out));
        auto x = random_vec(static_cast<size_t>(n_tok * n_in), static_cast<uint32_t>(n_tok * 7 + n_in));
        std::vector<float> y(static_cast<size_t>(n_tok * n_out)), scratch(static_cast<size_t>(n_in));
        matmul(w.view, x, y, n_tok, scratch);

        std::vector<float> deq(static_cast<size_t>(n_in * n_out));
        dequantize_row(type, w.bytes.data(), deq.data(), n_in * n_out);
        for (int64_t t = 0; t < n_tok; ++t) {
          for (int64_t r = 0; r < n_out; ++r) {
            double ref = 0;
            for (int64_t i = 0; i < n_in; ++i) ref += double(deq[r * n_in + i]) * double(x[t * n_in + i]);
            ASSERT_NEAR(y[t * n_out + r], ref, 1e-5 * (1 + std::sqrt(double(n_in))))
                << tensor_type_name(type) << " n_in=" << n_in << " r=" << r << " t=" << t;
          }
          // The same token alone gives bit-identical outputs.
          std::vector<float> y1(static_cast<size_t>(n_out));
          matmul(w.view, std::span<const float>(x).subspan(t * n_in, n_in), y1, 1, scratch);
          ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + t * n_out, sizeof(float) * n_out));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulAllTypes,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                                           TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(Matmul, RejectsMismatchedSizes) {
  auto w = make_weight(TensorType::F32, 4, 3, 1);
  std::vector<float> x(8), y(5), scratch(4);
  EXPECT_THROW(matmul(w.view, x, y, 2, scratch), std::invalid_argument);
}

}  // namespace
}  // namespace peregrine
