// The FP8 (E4M3) and 4-bit (Q4_0) KV caches: every E4M3 code against its definition, the error
// bounds of a round trip, the AVX2 dequantizers against the scalar bits on random rows, and the
// block operations (copy-on-write, export/import of whole blocks and of a head range) moving
// values and scales together.
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
#include "kv/kv_fp8.h"
#include "kv/kv_q4.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::HostKv;

// E4M3 "FN" by its definition: value = (-1)^s * 2^(e - 7) * (1 + m / 8), subnormal (e = 0)
// 2^-6 * m / 8; 0x7F is NaN.
double e4m3_reference(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) != 0 ? -mag : mag;
}

TEST(KvFp8, EveryCodeDecodesToItsDefinition) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN, never written
    EXPECT_EQ(double(e4m3_to_f32(uint8_t(c))), e4m3_reference(uint8_t(c))) << "code " << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
}

// Quantizing a value that is exactly a code (times the scale) gives that code back, and values
// between two codes go to the nearer one (ties to the even code).
TEST(KvFp8, RoundsToTheNearestCode) {
  std::vector<float> x(128);
  for (int c = 0; c < 127; ++c) x[size_t(c)] = e4m3_to_f32(uint8_t(c));
  x[127] = 448.f;  // the row's largest magnitude: scale exactly 1
  std::vector<uint8_t> codes(128);
  uint16_t scale = 0;
  quantize_kv_fp8_row(x.data(), codes.data(), &scale, 128);
  ASSERT_EQ(fp16_to_fp32(scale), 1.f);
  for (int c = 0; c < 127; ++c) EXPECT_EQ(codes[size_t(c)], c);
  // Midpoints: 1.0625 lies halfway between 1 (code 0x38, even) and 1.125 (0x39).
  std::vector<float> mid = {1.0625f, 1.1875f, 1.07f, -1.0625f, 448.f};
  std::vector<uint8_t> out(mid.size());
  quantize_kv_fp8_row(mid.data(), out.data(), &scale, int64_t(mid.size()));
  EXPECT_EQ(out[0], 0x38);
  EXPECT_EQ(out[1], 0x3A);  // between 0x39 (1.125) and 0x3A (1.25): to the even one
  EXPECT_EQ(out[2], 0x39);
  EXPECT_EQ(out[3], 0xB8);
}

// The row's scale is its largest magnitude over 448 rounded up to f16; each value is then within
// half an E4M3 step of itself: relative 2^-4 for normals, half of 2^-9 * scale below them.
void expect_fp8_bound(std::span<const float> x, std::span<const float> y) {
  float amax = 0;
  for (float e : x) amax = std::max(amax, std::fabs(e));
  const double scale = amax / 448.0 * (1.0 + std::ldexp(1.0, -10)) + std::ldexp(1.0, -24);
  for (size_t i = 0; i < x.size(); ++i) {
    const double bound = std::max(std::fabs(double(x[i])) * std::ldexp(1.0, -4), std::ldexp(1.0, -10) * scale);
    ASSERT_LE(std::fabs(double(x[i]) - double(y[i])), bound * 1.0001) << "value " << i << " of " << x[i];
  }
}

// Q4_0: within half a step (the f16 scale, |m| / 8 rounded up), except values that clip to +7
// (opposite in sign to the block's largest magnitude): within one step.
void expect_q4_bound(std::span<const float> x, std::span<const float> y) {
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const double step = amax / 8.0 * (1.0 + std::ldexp(1.0, -10)) + std::ldexp(1.0, -24);
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      const double err = std::fabs(double(x[i]) - double(y[i]));
      const bool clipped = std::fabs(x[i]) > 7.5 * step / (1.0 + std::ldexp(1.0, -9));
      ASSERT_LE(err, clipped ? step : step / 2) << "value " << i << " of " << x[i];
    }
  }
}

class KvQuantTypes : public ::testing::TestWithParam<KvType> {};

TEST_P(KvQuantTypes, RoundTripIsWithinTheTypesBound) {
  const KvType type = GetParam();
  std::mt19937 rng(17);
  for (int64_t head_dim : {32, 64, 128}) {
    HostKv kv(KvShape{2, 2, head_dim}, type, 4, 4);
    ASSERT_TRUE(kv.pool.reserve(0, 16));
    const size_t n = static_cast<size_t>(2 * head_dim);
    // Magnitudes from tiny (subnormal f16 scales) to large, plus an all-zero row and block.
    for (double magnitude : {1e-7, 1e-3, 0.5, 3.0, 80.0, 4000.0}) {
      std::uniform_real_distribution<float> d(-float(magnitude), float(magnitude));
      std::vector<float> k(n), v(n), k2(n), v2(n);
      for (auto& e : k) e = d(rng);
      for (auto& e : v) e = d(rng);
      for (size_t j = 0; j < size_t(head_dim); ++j) v[j] = 0.f;  // head 0's V row all zero
      k[5] = float(magnitude);
      const int64_t row = kv.pool.row_of(0, 7);
      kv.storage.write_row(1, row, k, v);
      kv.storage.read_row(1, row, k2, v2);
      for (size_t h = 0; h < 2; ++h) {
        const std::span<const float> kh(k.data() + h * head_dim, size_t(head_dim));
        const std::span<const float> kh2(k2.data() + h * head_dim, size_t(head_dim));
        const std::span<const float> vh(v.data() + h * head_dim, size_t(head_dim));
        const std::span<const float> vh2(v2.data() + h * head_dim, size_t(head_dim));
        if (type == KvType::FP8_E4M3) {
          expect_fp8_bound(kh, kh2), expect_fp8_bound(vh, vh2);
        } else {
          expect_q4_bound(kh, kh2), expect_q4_bound(vh, vh2);
        }
      }
      for (size_t j = 0; j < size_t(head_dim); ++j) EXPECT_EQ(v2[j], 0.f);
    }
  }
}

TEST_P(KvQuantTypes, NonFiniteValuesStoreZeroAndLeaveTheScale) {
  const KvType type = GetParam();
  HostKv kv(KvShape{1, 1, 32}, type, 1, 2);
  ASSERT_TRUE(kv.pool.reserve(0, 2));
  std::vector<float> k(32), v(32);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  for (auto& e : k) e = d(rng);
  for (auto& e : v) e = d(rng);
  std::vector<float> k_bad = k, v_bad = v;
  k_bad[3] = k[3] = std::numeric_limits<float>::quiet_NaN();
  k_bad[9] = std::numeric_limits<float>::infinity();
  v_bad[0] = -std::numeric_limits<float>::infinity();
  k[3] = k[9] = v[0] = 0.f;  // what the non-finite values must read back as, with the same scale
  kv.storage.write_row(0, 0, k_bad, v_bad);
  kv.storage.write_row(0, 1, k, v);
  std::vector<float> k1(32), v1(32), k2(32), v2(32);
  kv.storage.read_row(0, 0, k1, v1);
  kv.storage.read_row(0, 1, k2, v2);
  EXPECT_EQ(k1, k2);
  EXPECT_EQ(v1, v2);
  EXPECT_EQ(k1[3], 0.f);
  EXPECT_EQ(v1[0], 0.f);
}

// Copy-on-write, whole-block export/import and a head range's export/import move the values
// and the scales: the copies read back bit for bit.
TEST_P(KvQuantTypes, BlockOperationsKeepValuesAndScales) {
  const KvType type = GetParam();
  const KvShape shape{2, 4, 64};
  HostKv kv(shape, type, 6, 4);
  ASSERT_TRUE(kv.pool.reserve(0, 4));
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> d(-4.f, 4.f);
  const size_t n = 4 * 64;
  for (int64_t p = 0; p < 4; ++p) {
    std::vector<float> k(n), v(n);
    for (auto& e : k) e = d(rng) * float(p + 1);  // a different scale per position
    for (auto& e : v) e = d(rng);
    for (int64_t layer = 0; layer < 2; ++layer) kv.write(layer, 0, p, k, v);
  }
  kv.pool.append_shared_block(1, kv.pool.block_table(0)->blocks()[0]);
  ASSERT_TRUE(kv.pool.make_writable(1, 2));
  std::vector<std::byte> bytes(kv.storage.block_bytes());
  kv.sync();
  kv.storage.export_heads(kv.pool.block_table(0)->blocks()[0], 0, 4, bytes);
  HostKv other(shape, type, 2, 4);
  ASSERT_TRUE(other.pool.reserve(5, 4));
  other.storage.import_heads(other.pool.block_table(5)->blocks()[0], 0, 4, bytes);
  // Heads [1, 3) into a cache of two KV heads (a tensor-parallel rank's share).
  std::vector<std::byte> heads(kv.storage.heads_bytes(1, 3));
  kv.storage.export_heads(kv.pool.block_table(0)->blocks()[0], 1, 3, heads);
  HostKv half(KvShape{2, 2, 64}, type, 2, 4);
  ASSERT_TRUE(half.pool.reserve(5, 4));
  half.storage.import_heads(half.pool.block_table(5)->blocks()[0], 0, 2, heads);
  std::vector<float> a_k(n), a_v(n), b_k(n), b_v(n), c_k(n), c_v(n), h_k(n / 2), h_v(n / 2);
  for (int64_t layer = 0; layer < 2; ++layer) {
    for (int64_t p = 0; p < 4; ++p) {
      kv.read(layer, 0, p, a_k, a_v);
      kv.read(layer, 1, p, b_k, b_v);
      other.read(layer, 5, p, c_k, c_v);
      half.read(layer, 5, p, h_k, h_v);
      EXPECT_EQ(a_k, b_k) << "copy-on-write, layer " << layer << " pos " << p;
      EXPECT_EQ(a_v, b_v);
      EXPECT_EQ(a_k, c_k) << "export/import, layer " << layer << " pos " << p;
      EXPECT_EQ(a_v, c_v);
      EXPECT_TRUE(std::equal(h_k.begin(), h_k.end(), a_k.begin() + 64)) << "heads, layer " << layer;
      EXPECT_TRUE(std::equal(h_v.begin(), h_v.end(), a_v.begin() + 64));
    }
  }
}

TEST_P(KvQuantTypes, BytesAreWhatTheTypeSays) {
  const KvType type = GetParam();
  const KvShape shape{4, 4, 64};
  const HostKv f16(shape, KvType::F16, 32, 16), q(shape, type, 32, 16);
  const size_t row = type == KvType::FP8_E4M3 ? 64 + 2 : 2 * 18;  // one head's row of 64 values
  EXPECT_EQ(q.storage.bytes(), size_t{2 * 4 * 32 * 16 * 4} * row);
  EXPECT_EQ(kv_row_bytes(type, 64), row);
  EXPECT_LT(q.storage.bytes(), f16.storage.bytes());
  EXPECT_EQ(q.storage.block_bytes() * 32, q.storage.bytes());
}

INSTANTIATE_TEST_SUITE_P(Types, KvQuantTypes, ::testing::Values(KvType::FP8_E4M3, KvType::Q4_0),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

TEST(KvQ4, HeadDimMustBeEvenAndFp8TakesAny) {
  EXPECT_THROW(HostKv(KvShape{1, 2, 47}, KvType::Q4_0, 4, 16), UsageError);
  EXPECT_EQ(HostKv(KvShape{1, 2, 48}, KvType::Q4_0, 4, 16).storage.layer_view(0).scale_group, 48);
  EXPECT_NO_THROW(HostKv(KvShape{1, 2, 48}, KvType::FP8_E4M3, 4, 16));
  EXPECT_NO_THROW(HostKv(KvShape{1, 2, 6}, KvType::FP8_E4M3, 4, 16));
}

TEST(KvQuantNames, ParseAndChoices) {
  EXPECT_EQ(parse_kv_type("fp8"), KvType::FP8_E4M3);
  EXPECT_EQ(parse_kv_type("FP8_E4M3"), KvType::FP8_E4M3);
  EXPECT_EQ(parse_kv_type("q4_0"), KvType::Q4_0);
  EXPECT_EQ(parse_kv_type("q4"), std::nullopt);
  EXPECT_EQ(parse_kv_type("fp8_e5m2"), std::nullopt);
}

TEST(KvFp8Q4, Avx2DequantizersGiveTheScalarBits) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-50.f, 50.f);
  for (int64_t n : {32, 64, 96, 256}) {
    const auto un = static_cast<size_t>(n);
    std::vector<float> x(un), a(un), b(un, -1.f);
    for (auto& e : x) e = d(rng) * (&e - x.data() < 32 ? 1e-6f : 1.f);  // a subnormal-scale block too
    std::vector<uint8_t> codes(un), q4(un / 2);
    std::vector<uint16_t> s4(un / 32);
    uint16_t s8 = 0;
    quantize_kv_fp8_row(x.data(), codes.data(), &s8, n);
    dequantize_kv_fp8_row(codes.data(), s8, a.data(), n);
    avx2::dequantize_kv_fp8_row(codes.data(), s8, b.data(), n);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size())) << "fp8, n " << n;
    quantize_kv_q4_row(x.data(), q4.data(), s4.data(), n);
    dequantize_kv_q4_row(q4.data(), s4.data(), a.data(), n);
    avx2::dequantize_kv_q4_row(q4.data(), s4.data(), b.data(), n);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size())) << "q4_0, n " << n;
  }
  // Every one of the 256 codes (NaNs aside) and ragged lengths (the scalar tail).
  std::vector<uint8_t> all(255);
  for (int c = 0; c < 255; ++c) all[size_t(c)] = uint8_t(c == 0x7F ? 0 : c);
  std::vector<float> a(255), b(255);
  dequantize_kv_fp8_row(all.data(), fp32_to_fp16(0.375f), a.data(), 255);
  avx2::dequantize_kv_fp8_row(all.data(), fp32_to_fp16(0.375f), b.data(), 255);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()));
}

}  // namespace
}  // namespace peregrine
