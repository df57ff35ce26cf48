// matmul_group (several weights sharing one input, one meeting of the threads) against each
// weight's own single-threaded matmul, bit for bit: mixed types in one group, both activation
// modes, few tokens (shrinking chunks) and many (equal chunks), 1 to 3 threads; matmul_glu (a
// gated feed-forward's gate and up products with the activation applied by the threads that
// computed them) against the two products alone followed by the activation. And the thread pool's
// statistics, which bench reports per decode token.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/isa.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

using test::make_weight;
using test::random_vec;

// Each member alone on the calling thread.
std::vector<std::vector<float>> one_by_one(const std::vector<test::Weight>& ws, const std::vector<float>& x,
                                           int64_t n_tok, Isa isa, Activations act) {
  std::vector<std::vector<float>> ys;
  for (const auto& w : ws) {
    const int64_t n_in = w.view.row_length();
    std::vector<float> y(static_cast<size_t>(n_tok * w.view.n_rows()));
    std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 1)));
    std::vector<Q8Block> q8(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
    matmul(w.view, x, y, n_tok, scratch, nullptr, isa, act, q8);
    ys.push_back(std::move(y));
  }
  return ys;
}

TEST(MatmulGroup, EachMemberGetsTheBitsOfItsOwnMatmul) {
  ThreadPool pool2(2), pool3(3);
  const int64_t n_in = 256;
  // Q/K/V-like rows (a large member, then small ones of other types), one row (a gate logit)
  const std::vector<std::vector<TensorType>> groups = {
      {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K},
      {TensorType::F16, TensorType::Q6_K},
      {TensorType::F32, TensorType::Q5_K, TensorType::Q4_0, TensorType::BF16}};
  const std::vector<int64_t> rows = {300, 37, 129, 1};
  for (Isa isa : supported_isas()) {
    for (const auto& types : groups) {
      std::vector<test::Weight> ws;
      for (size_t i = 0; i < types.size(); ++i) {
        ws.push_back(make_weight(types[i], n_in, rows[i], static_cast<uint32_t>(11 + i)));
      }
      for (int64_t n_tok : {1, 3, 17}) {
        const auto x = random_vec(static_cast<size_t>(n_tok * n_in), static_cast<uint32_t>(5 + n_tok));
        for (Activations act : {Activations::Q8, Activations::F32}) {
          const auto want = one_by_one(ws, x, n_tok, isa, act);
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
            std::vector<std::vector<float>> ys;
            std::vector<MatmulTarget> targets;
            for (const auto& w : ws) ys.emplace_back(static_cast<size_t>(n_tok * w.view.n_rows()), -1.f);
            for (size_t i = 0; i < ws.size(); ++i) targets.push_back({&ws[i].view, ys[i]});
            std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 3)));
            std::vector<Q8Block> q8(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
            const int64_t before = pool ? pool->stats().dispatches : 0;
            matmul_group(targets, x, n_tok, scratch, pool, isa, act, q8);
            // One meeting of the threads for the products (and one more when the tokens are
            // many enough to quantize in parallel).
            if (pool) {
              EXPECT_LE(pool->stats().dispatches - before, n_tok >= 2 * pool->size() ? 2 : 1);
            }
            for (size_t i = 0; i < ws.size(); ++i) {
              ASSERT_EQ(0, std::memcmp(want[i].data(), ys[i].data(), sizeof(float) * want[i].size()))
                  << isa_name(isa) << " " << tensor_type_name(types[i]) << " member " << i << " n_tok=" << n_tok
                  << " threads=" << (pool ? pool->size() : 1) << (act == Activations::Q8 ? " q8" : " f32");
            }
          }
        }
      }
    }
  }
}

TEST(MatmulGroup, RejectsMismatchedGroups) {
  ThreadPool pool(2);
  auto a = make_weight(TensorType::F32, 64, 8, 1), b = make_weight(TensorType::F32, 32, 8, 2);
  std::vector<float> x(64), ya(8), yb(8), scratch(static_cast<size_t>(matmul_scratch_floats(64, 2)));
  std::vector<Q8Block> q8(2);
  const MatmulTarget differ[] = {{&a.view, ya}, {&b.view, yb}};
  EXPECT_THROW(matmul_group(differ, x, 1, scratch, &pool, Isa::Scalar, Activations::F32, q8), std::invalid_argument);
  std::vector<float> short_y(7);
  const MatmulTarget short_out[] = {{&a.view, short_y}};
  EXPECT_THROW(matmul_group(short_out, x, 1, scratch, &pool, Isa::Scalar, Activations::F32, q8), std::invalid_argument);
  const MatmulTarget five[] = {{&a.view, ya}, {&a.view, ya}, {&a.view, ya}, {&a.view, ya}, {&a.view, ya}};
  EXPECT_THROW(matmul_group(five, x, 1, scratch, &pool, Isa::Scalar, Activations::F32, q8), std::invalid_argument);
  EXPECT_THROW(matmul_group({}, x, 1, scratch, &pool, Isa::Scalar, Activations::F32, q8), std::invalid_argument);
}

TEST(MatmulGlu, GivesTheProductsThenTheActivationBitForBit) {
  ThreadPool pool2(2), pool3(3);
  const int64_t n_in = 256;
  const std::vector<std::pair<TensorType, TensorType>> pairs = {{TensorType::Q4_0, TensorType::Q4_0},
                                                                {TensorType::Q8_0, TensorType::Q4_K},
                                                                {TensorType::F16, TensorType::Q6_K},
                                                                {TensorType::F32, TensorType::BF16}};
  for (Isa isa : supported_isas()) {
    for (const auto& [gate_type, up_type] : pairs) {
      for (int64_t ffn : {300, 1000}) {  // ragged: not a multiple of a chunk or a row group
        std::vector<test::Weight> ws;    // moved in, so each view keeps pointing at its own bytes
        ws.push_back(make_weight(gate_type, n_in, ffn, 21));
        ws.push_back(make_weight(up_type, n_in, ffn, 22));
        for (int64_t n_tok : {1, 3, 17, 70}) {
          const auto x = random_vec(static_cast<size_t>(n_tok * n_in), static_cast<uint32_t>(9 + n_tok));
          for (Activations act : {Activations::Q8, Activations::F32}) {
            const auto products = one_by_one(ws, x, n_tok, isa, act);
            for (Glu glu : {Glu::Silu, Glu::Gelu}) {
              std::vector<float> want = products[0];
              kernel_table(isa).glu(glu, want.data(), products[1].data(), want.data(),
                                    static_cast<int64_t>(want.size()));
              for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
                std::vector<float> gate(want.size(), -1.f), up(want.size(), -1.f);
                std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 3)));
                std::vector<Q8Block> q8(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
                const int64_t before = pool ? pool->stats().dispatches : 0;
                matmul_glu({&ws[0].view, gate}, {&ws[1].view, up}, glu, x, n_tok, scratch, pool, isa, act, q8);
                if (pool) {
                  EXPECT_LE(pool->stats().dispatches - before, n_tok >= 2 * pool->size() ? 2 : 1);
                }
                const std::string what =
                    std::string(isa_name(isa)) + " " + std::string(tensor_type_name(gate_type)) + "/" +
                    std::string(tensor_type_name(up_type)) + " ffn=" + std::to_string(ffn) +
                    " n_tok=" + std::to_string(n_tok) + " threads=" + std::to_string(pool ? pool->size() : 1) +
                    (act == Activations::Q8 ? " q8" : " f32") + (glu == Glu::Silu ? " silu" : " gelu");
                ASSERT_EQ(0, std::memcmp(want.data(), gate.data(), sizeof(float) * want.size())) << what;
                ASSERT_EQ(0, std::memcmp(products[1].data(), up.data(), sizeof(float) * want.size())) << what;
              }
            }
          }
        }
      }
    }
  }
}

TEST(MatmulGlu, RejectsGateAndUpOfDifferentShapes) {
  ThreadPool pool(2);
  auto gate = make_weight(TensorType::F32, 64, 8, 1), up = make_weight(TensorType::F32, 64, 9, 2);
  std::vector<float> x(64), yg(8), yu(9), scratch(static_cast<size_t>(matmul_scratch_floats(64, 2)));
  std::vector<Q8Block> q8(2);
  EXPECT_THROW(
      matmul_glu({&gate.view, yg}, {&up.view, yu}, Glu::Silu, x, 1, scratch, &pool, Isa::Scalar, Activations::F32, q8),
      std::invalid_argument);
  auto narrow = make_weight(TensorType::F32, 32, 8, 3);
  std::vector<float> yn(8);
  EXPECT_THROW(matmul_glu({&gate.view, yg}, {&narrow.view, yn}, Glu::Silu, x, 1, scratch, &pool, Isa::Scalar,
                          Activations::F32, q8),
               std::invalid_argument);
}

TEST(ThreadPoolStats, CountsCallsTasksAndTime) {
  ThreadPool pool(2);
  pool.reset_stats();
  std::vector<std::atomic<int64_t>> sums(64);
  for (int rep = 0; rep < 10; ++rep) {
    pool.parallel_for(64, [&](int64_t task, int) {
      int64_t s = 0;
      for (int64_t i = 0; i < 20000; ++i) s += (i * task) ^ rep;
      sums[static_cast<size_t>(task)] += s;
    });
  }
  pool.parallel_for(1, [](int64_t, int) {});  // runs on the caller: not a meeting of the threads
  const PoolStats st = pool.stats();
  EXPECT_EQ(st.dispatches, 10);
  EXPECT_EQ(st.tasks, 640);
  EXPECT_GT(st.wall_ns, 0);
  EXPECT_GT(st.busy_ns, 0);
  // Busy time is counted per thread inside the calls: at most both threads for the whole call.
  EXPECT_LE(st.busy_ns, 2 * st.wall_ns + 1000000);
  pool.reset_stats();
  EXPECT_EQ(pool.stats().dispatches, 0);
  EXPECT_EQ(pool.stats().busy_ns, 0);
}

}  // namespace
}  // namespace peregrine
