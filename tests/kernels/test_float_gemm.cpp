// The float GEMM (F32/F16/BF16 weights) through the matmul entry point, on every path this CPU
// runs: for every batch size 1..70 (past the avx512 kernel's 36-token block and AVX2's 32, so
// every tile shape and ragged token tile), output counts that are no multiple of any row tile
// (two tokens take 8-row tiles: 23 leaves 7 rows, cut into 4 + 3), and row lengths that are odd
// multiples of 16 or off the 16-lane grid, each output is the scalar mirror of its path's
// documented order, bit for bit, on two threads. Every token's result is then also the one it
// gets alone: batch invariance on ragged edges.
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "float_order_mirrors.h"
#include "kernel_test_util.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::random_vec;

constexpr TensorType kFloatTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16};

// The mirror of `isa`'s float order, for every (token, row): ref[t * n_out + r].
std::vector<float> mirror_outputs(Isa isa, const std::vector<float>& w, const std::vector<float>& x, int64_t n_in,
                                  int64_t n_out, int64_t n_tok) {
  const auto dot = isa == Isa::Avx512 ? test::avx512_order_dot : test::avx2_order_dot;
  std::vector<float> ref(static_cast<size_t>(n_tok * n_out));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < n_out; ++r) ref[t * n_out + r] = dot(&w[r * n_in], &x[t * n_in], n_in);
  return ref;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(FloatGemm, EveryBatchSizeFollowsItsPathsOrderOnRaggedEdges) {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) isas.push_back(isa);
  if (isas.empty()) GTEST_SKIP() << "this CPU runs neither the AVX2 nor the avx512 float GEMM";
  if (!isa_supported(Isa::Avx512)) std::cout << "avx512 float GEMM skipped: this CPU cannot run it\n";
  ThreadPool pool(2);
  constexpr int64_t kMaxTokens = 70;
  for (Isa isa : isas) {
    for (TensorType type : kFloatTypes) {
      for (int64_t n_in : {16, 48, 208, 560, 215}) {
        for (int64_t n_out : {13, 23, 37}) {
          const auto w = make_weight(type, n_in, n_out, static_cast<uint32_t>(n_in * 5 + n_out + int(type)));
          std::vector<float> deq(static_cast<size_t>(n_in * n_out));  // exact: f16/bf16 widen exactly
          dequantize_row(type, w.bytes.data(), deq.data(), n_in * n_out);
          const auto x =
              random_vec(static_cast<size_t>(kMaxTokens * n_in), static_cast<uint32_t>(n_in + 3 * n_out), -2.f, 2.f);
          const auto ref = mirror_outputs(isa, deq, x, n_in, n_out, kMaxTokens);
          std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, pool.size())));
          for (int64_t n_tok = 1; n_tok <= kMaxTokens; ++n_tok) {
            std::vector<float> y(static_cast<size_t>(n_tok * n_out), -1.f);
            matmul(w.view, std::span<const float>(x).first(static_cast<size_t>(n_tok * n_in)), y, n_tok, scratch, &pool,
                   isa);
            for (int64_t i = 0; i < n_tok * n_out; ++i) {
              ASSERT_TRUE(same_bits(ref[i], y[i]))
                  << isa_name(isa) << " " << tensor_type_name(type) << " n_in=" << n_in << " n_out=" << n_out
                  << " tokens=" << n_tok << " token " << i / n_out << " row " << i % n_out << ": " << ref[i] << " vs "
                  << y[i];
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace peregrine
