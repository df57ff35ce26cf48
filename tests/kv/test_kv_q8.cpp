// The 8-bit KV cache (KvType::Q8_0): the error bound of a round trip, copy-on-write of quantized
// blocks, the head-dimension rule and the memory it saves over f16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/host_kv.h"
#include "format/tensor_type.h"
#include "kernels/isa.h"
#include "kernels/x86/simd_avx2.h"
#include "kv/kv_q8.h"
#include "model/config.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

ModelConfig config(int64_t layers, int64_t kv_heads, int64_t head_dim) {
  ModelConfig c;
  c.n_layers = layers;
  c.n_heads = kv_heads * 2;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.dim = c.n_heads * head_dim;
  return c;
}

// A value is within half a step of its original. The step is the stored f16 scale, which is
// absmax / 127 rounded up to f16: at most one f16 ulp above (relative 2^-10 for normal scales,
// 2^-24 absolute for subnormal ones).
void expect_within_half_step(std::span<const float> x, std::span<const float> y, int64_t head_dim) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const double step = amax / 127.0 * (1.0 + std::ldexp(1.0, -10)) + std::ldexp(1.0, -24);
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      ASSERT_LE(std::fabs(double(x[i]) - double(y[i])), step / 2) << "value " << i << " (head_dim " << head_dim << ")";
    }
  }
}

TEST(KvQ8, RoundTripIsWithinHalfAStepPerValue) {
  std::mt19937 rng(11);
  for (int64_t head_dim : {32, 64, 128}) {
    const ModelConfig cfg = config(2, 2, head_dim);
    HostKv kv(cfg.kv_shape(), KvType::Q8_0, 4, 4);
    ASSERT_TRUE(kv.pool.reserve(0, 16));
    const size_t n = static_cast<size_t>(2 * head_dim);
    // Magnitudes from tiny (subnormal f16 scales) to large, per block, plus all-zero blocks.
    for (double magnitude : {1e-7, 1e-3, 0.5, 3.0, 80.0, 4000.0}) {
      std::uniform_real_distribution<float> d(-float(magnitude), float(magnitude));
      std::vector<float> k(n), v(n), k2(n), v2(n);
      for (auto& e : k) e = d(rng);
      for (auto& e : v) e = d(rng);
      for (size_t j = 0; j < 32; ++j) v[j] = 0.f;  // one all-zero block
      k[5] = float(magnitude);                      // the absmax itself round-trips to 127 * step
      const int64_t row = kv.pool.row_of(0, 7);
      kv.storage.write_row(1, row, k, v);
      kv.storage.read_row(1, row, k2, v2);
      expect_within_half_step(k, k2, head_dim);
      expect_within_half_step(v, v2, head_dim);
      for (size_t j = 0; j < 32; ++j) EXPECT_EQ(v2[j], 0.f);
    }
  }
}

TEST(KvQ8, QuantizerKeepsTheRangeAndIgnoresNonFiniteValues) {
  std::vector<float> x(32, 0.25f);
  x[0] = -1.f;
  x[1] = std::numeric_limits<float>::quiet_NaN();
  x[2] = std::numeric_limits<float>::infinity();
  x[3] = 1e9f;  // beyond f16's range: the scale saturates, values clip to +-127 steps
  std::vector<int8_t> q(32);
  std::vector<uint16_t> s(1);
  quantize_kv_q8_row(x.data(), q.data(), s.data(), 32);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], 127);
  EXPECT_TRUE(std::isfinite(fp16_to_fp32(s[0])));
  x[3] = 0.5f;
  quantize_kv_q8_row(x.data(), q.data(), s.data(), 32);
  EXPECT_EQ(q[0], -127);  // absmax -> -127 exactly: the scale is never below absmax / 127
  std::vector<float> y(32);
  dequantize_kv_q8_row(q.data(), s.data(), y.data(), 32);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_NEAR(y[4], 0.25f, 1.f / 254 * 1.001);
}

TEST(KvQ8, CopyOnWriteCopiesValuesAndScales) {
  const ModelConfig cfg = config(2, 1, 32);
  HostKv kv(cfg.kv_shape(), KvType::Q8_0, 4, 4);
  ASSERT_TRUE(kv.pool.reserve(0, 4));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-4.f, 4.f);
  std::vector<std::vector<float>> rows;
  for (int64_t p = 0; p < 4; ++p) {
    std::vector<float> k(32), v(32);
    for (auto& e : k) e = d(rng) * float(p + 1);  // a different scale per position
    for (auto& e : v) e = d(rng);
    for (int64_t layer = 0; layer < 2; ++layer) kv.write(layer, 0, p, k, v);
  }
  kv.pool.append_shared_block(1, kv.pool.block_table(0)->blocks()[0]);
  ASSERT_TRUE(kv.pool.make_writable(1, 2));
  ASSERT_NE(kv.pool.row_of(1, 0), kv.pool.row_of(0, 0));
  std::vector<float> a_k(32), a_v(32), b_k(32), b_v(32);
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int64_t p = 0; p < 4; ++p) {
      kv.read(layer, 0, p, a_k, a_v);
      kv.read(layer, 1, p, b_k, b_v);
      EXPECT_EQ(a_k, b_k) << "layer " << layer << " pos " << p;
      EXPECT_EQ(a_v, b_v) << "layer " << layer << " pos " << p;
    }
  }
}

// A head dimension that is not a multiple of 32 (the demo models' 8, Phi-2's 80) keeps one scale
// per row: still within half a step, the step set by the row's largest magnitude.
TEST(KvQ8, OtherHeadDimsTakeOneScaleARow) {
  for (int64_t head_dim : {8, 48, 80}) {
    HostKv kv(config(1, 2, head_dim).kv_shape(), KvType::Q8_0, 4, 16);
    EXPECT_EQ(kv.storage.layer_view(0).scale_group, head_dim);
    EXPECT_EQ(kv_row_bytes(KvType::Q8_0, head_dim), size_t(head_dim + 2));
    ASSERT_TRUE(kv.pool.reserve(0, 1));
    std::mt19937 rng(static_cast<uint32_t>(head_dim));
    std::uniform_real_distribution<float> d(-3.f, 3.f);
    std::vector<float> k(size_t(2 * head_dim)), v(k.size()), k2(k.size()), v2(k.size());
    for (auto& e : k) e = d(rng);
    for (auto& e : v) e = d(rng);
    kv.write(0, 0, 0, k, v);
    kv.read(0, 0, 0, k2, v2);
    for (int64_t h = 0; h < 2; ++h) {
      float amax = 0;
      for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(k[size_t(h * head_dim + i)]));
      const double step = amax / 127.0 * (1.0 + std::ldexp(1.0, -10));
      for (int64_t i = 0; i < head_dim; ++i) {
        const size_t at = size_t(h * head_dim + i);
        ASSERT_LE(std::fabs(double(k[at]) - double(k2[at])), step / 2) << "head_dim " << head_dim << " value " << at;
      }
    }
  }
  EXPECT_NO_THROW(HostKv(config(1, 2, 8).kv_shape(), KvType::F16, 4, 16));
}

TEST(KvQ8, TakesAboutHalfTheBytesOfF16) {
  const ModelConfig cfg = config(4, 4, 64);
  const HostKv f16(cfg.kv_shape(), KvType::F16, 32, 16), q8(cfg.kv_shape(), KvType::Q8_0, 32, 16);
  // 2 (K,V) * 4 layers * 32 blocks * 16 slots * 4 heads * (64 int8 + 2 f16 scales)
  EXPECT_EQ(q8.storage.bytes(), size_t{2 * 4 * 32 * 16 * 4 * 68});
  EXPECT_DOUBLE_EQ(double(q8.storage.bytes()) / double(f16.storage.bytes()), 1.0625 / 2.0);
  // What bytes() reports is what the views point at: the last row's last scale is in range.
  const KvLayerView view = q8.storage.layer_view(3);
  ASSERT_NE(view.k_bytes, nullptr);
  ASSERT_NE(view.v_scales, nullptr);
  EXPECT_EQ(view.scale_group, 32);
  EXPECT_EQ(view.k_f32, nullptr);
  EXPECT_EQ(view.k_u16, nullptr);
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST(KvQ8, Avx2DequantizerGivesTheScalarBits) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-50.f, 50.f);
  std::vector<float> x(256), a(256), b(256);
  for (auto& e : x) e = d(rng) * (&e - x.data() < 32 ? 1e-6f : 1.f);  // a subnormal-scale block too
  std::vector<int8_t> q(256);
  std::vector<uint16_t> s(8);
  quantize_kv_q8_row(x.data(), q.data(), s.data(), 256);
  dequantize_kv_q8_row(q.data(), s.data(), a.data(), 256);
  avx2::dequantize_kv_q8_row(q.data(), s.data(), b.data(), 256);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()));
}

}  // namespace
}  // namespace peregrine
