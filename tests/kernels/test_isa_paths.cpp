// Every ISA path this machine has, against the scalar reference on random inputs with ragged
// sizes, plus the invariances the forward pass relies on (batch, thread count, row split).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

using test::kAllTypes;
using test::make_weight;
using test::random_vec;


TEST(Isa, ScalarAlwaysSupportedAndActiveIsSupported) {
  const auto isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::Scalar);
  EXPECT_TRUE(isa_supported(active_isa()));
  std::string names;
  for (Isa isa : isas) names += std::string(isa_name(isa)) + " ";
  std::printf("[ isa paths tested here: %s; active: %s ]\n", names.c_str(), std::string(isa_name(active_isa())).c_str());
}

TEST(ThreadPool, RunsEveryTaskOnceAndIsReusable) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n_tasks : {0, 1, 2, 7, 100, 1000}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n_tasks));
        std::atomic<bool> bad_thread{false};
        pool.parallel_for(n_tasks, [&](int64_t task, int thread) {
          hits[static_cast<size_t>(task)].fetch_add(1);
          if (thread < 0 || thread >= threads) bad_thread = true;
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, " << n_tasks << " tasks";
        ASSERT_FALSE(bad_thread.load());
      }
    }
  }
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
  EXPECT_GE(physical_core_count(), 1);
}

TEST(IsaDot, EveryPathMatchesDoubleReference) {
  for (Isa isa : supported_isas()) {
    for (int64_t n : {1, 3, 7, 8, 9, 31, 32, 33, 63, 64, 100, 257, 1000}) {
      auto a = random_vec(static_cast<size_t>(n), 1 + static_cast<uint32_t>(n));
      auto b = random_vec(static_cast<size_t>(n), 100 + static_cast<uint32_t>(n));
      double ref = 0;
      for (int64_t i = 0; i < n; ++i) ref += double(a[i]) * double(b[i]);
      // f32 accumulation of n products of magnitude <= 1: error grows like sqrt(n) ulps.
      EXPECT_NEAR(dot(a.data(), b.data(), n, isa), ref, 2e-6 * (1 + std::sqrt(double(n))) * 4)
          << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(IsaAvx2, DequantizeIsExactAndFusedDotIsBitIdentical) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  for (TensorType type : kAllTypes) {
    const int64_t block = tensor_type_info(type).block_elems;
    for (int64_t n : block == 1 ? std::vector<int64_t>{1, 7, 8, 9, 31, 33, 100} : std::vector<int64_t>{block, 3 * block}) {
      auto w = make_weight(type, n, 1, static_cast<uint32_t>(n + 17));
      std::vector<float> ref(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      dequantize_row(type, w.bytes.data(), ref.data(), n);
      avx2::dequantize_row(type, w.bytes.data(), got.data(), n);
      ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), sizeof(float) * n)) << tensor_type_name(type) << " n=" << n;
      if (!avx2::has_fused(type)) continue;
      auto x = random_vec(static_cast<size_t>(n), static_cast<uint32_t>(n + 5));
      const float fused = avx2::dot_row(type, w.bytes.data(), x.data(), n);
      const float two_step = avx2::dot_f32(ref.data(), x.data(), n);
      ASSERT_EQ(0, std::memcmp(&fused, &two_step, sizeof(float))) << tensor_type_name(type) << " n=" << n;
    }
  }
}

// K-quant blocks with arbitrary bits (every 6-bit scale/min pattern, every 2-bit high field), not
// only what our quantizer writes: the AVX2 decoders must give the format's exact values.
TEST(IsaAvx2, KQuantDecodersExactOnRandomBits) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(99);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) {
    const int64_t n = 256 * 6;
    std::vector<std::byte> bytes(tensor_bytes(type, n));
    for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
    const size_t block_bytes = tensor_type_info(type).block_bytes;
    for (size_t blk = 0; blk < bytes.size() / block_bytes; ++blk) {
      // Finite fp16 scales (exponent field below all-ones): random sign, exponent and mantissa.
      const size_t at = type == TensorType::Q4_K ? 0 : 208;
      for (size_t k = 0; k < (type == TensorType::Q4_K ? 2u : 1u); ++k) {
        const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | ((rng() % 30) << 10));
        std::memcpy(&bytes[blk * block_bytes + at + 2 * k], &h, 2);
      }
    }
    std::vector<float> ref(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    dequantize_row(type, bytes.data(), ref.data(), n);
    avx2::dequantize_row(type, bytes.data(), got.data(), n);
    ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), sizeof(float) * n)) << tensor_type_name(type);
  }
}

// Matmul on every path vs the scalar reference (dequantize, double dot); then the same outputs,
// bit for bit, for one token alone, for other thread counts and with minimal scratch.
TEST(IsaMatmul, EveryPathEveryTypeMatchesReferenceAndIsInvariant) {
  ThreadPool pool2(2), pool3(3);
  for (Isa isa : supported_isas()) {
    for (TensorType type : kAllTypes) {
      const int64_t block = tensor_type_info(type).block_elems;
      const std::vector<int64_t> n_ins = block == 1 ? std::vector<int64_t>{5, 67, 130} : std::vector<int64_t>{block, 3 * block};
      for (int64_t n_in : n_ins) {
        for (int64_t n_out : {1, 9, 37}) {
          for (int64_t n_tok : {1, 2, 5}) {
            auto w = make_weight(type, n_in, n_out, static_cast<uint32_t>(n_in * 31 + n_out));
            auto x = random_vec(static_cast<size_t>(n_tok * n_in), static_cast<uint32_t>(n_tok * 7 + n_in));
            std::vector<float> y(static_cast<size_t>(n_tok * n_out));
            std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, 3)));
            matmul(w.view, x, y, n_tok, scratch, &pool2, isa);

            std::vector<float> deq(static_cast<size_t>(n_in * n_out));
            dequantize_row(type, w.bytes.data(), deq.data(), n_in * n_out);
            const std::string where = std::string(isa_name(isa)) + " " + std::string(tensor_type_name(type)) +
                                      " n_in=" + std::to_string(n_in) + " n_out=" + std::to_string(n_out) +
                                      " n_tok=" + std::to_string(n_tok);
            for (int64_t t = 0; t < n_tok; ++t) {
              for (int64_t r = 0; r < n_out; ++r) {
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < n_in; ++i) {
                  ref += double(deq[r * n_in + i]) * double(x[t * n_in + i]);
                  mag += std::fabs(double(deq[r * n_in + i]) * double(x[t * n_in + i]));
                }
                // Tolerance: f32 accumulation, relative to the sum of |products|.
                ASSERT_NEAR(y[t * n_out + r], ref, 1e-6 * (1 + mag) * std::sqrt(double(n_in))) << where;
              }
              std::vector<float> y1(static_cast<size_t>(n_out));
              matmul(w.view, std::span<const float>(x).subspan(t * n_in, n_in), y1, 1, scratch, nullptr, isa);
              ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + t * n_out, sizeof(float) * n_out)) << where << " alone";
            }
            std::vector<float> y3(y.size()), y_min(y.size());
            matmul(w.view, x, y3, n_tok, scratch, &pool3, isa);
            ASSERT_EQ(0, std::memcmp(y3.data(), y.data(), sizeof(float) * y.size())) << where << " 3 threads";
            std::vector<float> small(static_cast<size_t>(n_in));
            matmul(w.view, x, y_min, n_tok, small, nullptr, isa);
            ASSERT_EQ(0, std::memcmp(y_min.data(), y.data(), sizeof(float) * y.size())) << where << " small scratch";
          }
        }
      }
    }
  }
}

TEST(IsaMatmul, RejectsTooLittleScratchForThePool) {
  ThreadPool pool(2);
  auto w = make_weight(TensorType::F32, 8, 4, 3);
  std::vector<float> x(8), y(4), scratch(8);
  EXPECT_THROW(matmul(w.view, x, y, 1, scratch, &pool, Isa::Scalar), std::invalid_argument);
}

}  // namespace
}  // namespace peregrine
