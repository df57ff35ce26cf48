// Tensor types: exact dequantization of hand-built blocks, quantize->dequantize error bounds on
// random data, and fp16/bf16 conversion edge cases.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "format/tensor_type.h"

namespace peregrine {
namespace {

std::vector<float> dequant(TensorType t, const std::vector<uint8_t>& bytes, int64_t n) {
  EXPECT_EQ(bytes.size(), tensor_bytes(t, n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, bytes.data(), out.data(), n);
  return out;
}

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

TEST(TensorType, TableAndParse) {
  EXPECT_EQ(tensor_type_info(TensorType::Q4_K).block_bytes, 144);
  EXPECT_EQ(tensor_type_info(TensorType::Q6_K).block_bytes, 210);
  EXPECT_EQ(tensor_type_info(TensorType::Q8_0).block_bytes, 34);
  EXPECT_EQ(tensor_type_info(TensorType::Q4_0).block_bytes, 18);
  EXPECT_EQ(tensor_type_info(3u)->type, TensorType::Q4_1);
  EXPECT_FALSE(tensor_type_info(16u).has_value());  // iq2_xxs: not supported
  EXPECT_FALSE(tensor_type_info(9u).has_value());   // q8_1: not a weight type
  // Block sizes as ggml defines them (ggml_type_size / ggml_blck_size).
  const std::pair<TensorType, int64_t> sizes[] = {{TensorType::Q4_1, 20}, {TensorType::Q5_0, 22},
                                                  {TensorType::Q5_1, 24}, {TensorType::IQ4_NL, 18},
                                                  {TensorType::Q2_K, 84}, {TensorType::Q3_K, 110},
                                                  {TensorType::Q5_K, 176}, {TensorType::IQ4_XS, 136}};
  for (auto [t, bytes] : sizes) {
    EXPECT_EQ(tensor_type_info(t).block_bytes, bytes) << tensor_type_name(t);
    EXPECT_EQ(tensor_type_info(static_cast<uint32_t>(t))->type, t);
    EXPECT_EQ(parse_tensor_type(tensor_type_name(t)), t);
  }
  EXPECT_EQ(tensor_type_info(TensorType::Q5_K).block_elems, 256);
  EXPECT_EQ(tensor_type_info(TensorType::IQ4_NL).block_elems, 32);
  EXPECT_EQ(tensor_type_info(30u)->type, TensorType::BF16);
  EXPECT_EQ(parse_tensor_type("Q4_k"), TensorType::Q4_K);
  EXPECT_EQ(parse_tensor_type("BF16"), TensorType::BF16);
  EXPECT_EQ(parse_tensor_type("IQ4_xs"), TensorType::IQ4_XS);
  EXPECT_FALSE(parse_tensor_type("q4_k_m").has_value());  // a mix, not a type (format/quant_scheme.h)
  EXPECT_EQ(tensor_type_name(TensorType::Q6_K), "q6_K");
  EXPECT_EQ(tensor_bytes(TensorType::Q4_K, 512), 288u);
  EXPECT_EQ(tensor_bytes(TensorType::F16, 7), 14u);
  EXPECT_THROW(tensor_bytes(TensorType::Q8_0, 33), std::invalid_argument);
  EXPECT_THROW(tensor_bytes(TensorType::F32, std::numeric_limits<int64_t>::max()), std::overflow_error);
}

TEST(TensorType, DequantF32F16BF16) {
  std::vector<uint8_t> f32(8);
  const float a = 1.5f, b = -3.25f;
  std::memcpy(f32.data(), &a, 4);
  std::memcpy(f32.data() + 4, &b, 4);
  EXPECT_EQ(dequant(TensorType::F32, f32, 2), (std::vector<float>{1.5f, -3.25f}));
  std::vector<uint8_t> f16 = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};  // 1, -2, 2^-24
  EXPECT_EQ(dequant(TensorType::F16, f16, 3), (std::vector<float>{1.f, -2.f, std::ldexp(1.f, -24)}));
  std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x20, 0xC1};  // 1, -10
  EXPECT_EQ(dequant(TensorType::BF16, bf16, 2), (std::vector<float>{1.f, -10.f}));
}

TEST(TensorType, DequantQ8_0HandBuilt) {
  std::vector<uint8_t> b(34);
  put_u16(b, 0, 0x3800);  // d = 0.5
  const int8_t q[4] = {-128, -1, 1, 127};
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(q[i % 4]);
  auto y = dequant(TensorType::Q8_0, b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.5f * q[i % 4]) << i;
}

TEST(TensorType, DequantQ4_0HandBuilt) {
  std::vector<uint8_t> b(18 * 2);
  put_u16(b, 0, 0x4000);   // block 0: d = 2
  put_u16(b, 18, 0xB400);  // block 1: d = -0.25
  b[2] = 0x1F;             // elem 0 = lo 15, elem 16 = hi 1
  b[2 + 15] = 0x80;        // elem 15 = lo 0, elem 31 = hi 8
  b[18 + 2 + 3] = 0xC4;    // block 1: elem 3 = 4, elem 19 = 12
  auto y = dequant(TensorType::Q4_0, b, 64);
  EXPECT_EQ(y[0], 14.f);
  EXPECT_EQ(y[16], -14.f);
  EXPECT_EQ(y[15], -16.f);
  EXPECT_EQ(y[31], 0.f);
  EXPECT_EQ(y[1], -16.f);  // zero nibble = -8
  EXPECT_EQ(y[32 + 3], 1.f);     // -0.25 * (4 - 8)
  EXPECT_EQ(y[32 + 19], -1.f);   // -0.25 * (12 - 8)
  EXPECT_EQ(y[32 + 0], 2.f);     // -0.25 * (0 - 8)
}

TEST(TensorType, DequantQ4_KHandBuilt) {
  // Sub-block scales and mins chosen so every one of the 6-bit fields' high bits is exercised.
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 5};
  const int mn[8] = {0, 4, 60, 7, 20, 63, 1, 40};
  std::vector<uint8_t> b(144);
  put_u16(b, 0, 0x3800);  // d = 0.5
  put_u16(b, 2, 0x3400);  // dmin = 0.25
  // scales[0..3]: sc[0..3] | hi2(sc[4..7]) << 6; [4..7]: mn[0..3] | hi2(mn[4..7]) << 6;
  // [8..11]: lo4(sc[4..7]) | lo4(mn[4..7]) << 4.  Packed by hand:
  const uint8_t packed[12] = {0x41, 0x82, 0xC3, 0x3F, 0x40, 0xC4, 0x3C, 0x87, 0x41, 0xF1, 0x10, 0x85};
  std::memcpy(b.data() + 4, packed, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i % 16) | (((i * 7 + 3) % 16) << 4));
  auto y = dequant(TensorType::Q4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    const uint8_t byte = b[16 + 32 * (j / 2) + l];
    const int q = (j % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    EXPECT_EQ(y[e], 0.5f * sc[j] * q - 0.25f * mn[j]) << "element " << e;
  }
  // Literal spot checks: element 0 (q=0): -0.25*0 = 0; element 32+31 (sub-block 1, hi nibble
  // of byte 31: (31*7+3)%16 = 12): 0.5*2*12 - 0.25*4 = 11.
  EXPECT_EQ(y[0], 0.f);
  EXPECT_EQ(y[63], 11.f);
  // element 255: sub-block 7, hi nibble of qs[127] = (127*7+3)%16 = 12: 0.5*5*12 - 0.25*40 = 20
  EXPECT_EQ(y[255], 20.f);
}

TEST(TensorType, DequantQ6_KLiteral) {
  std::vector<uint8_t> b(210);
  for (int j = 0; j < 16; ++j) b[192 + j] = 1;  // all scales 1
  put_u16(b, 208, 0x3C00);                       // d = 1
  b[128 + 0] = 0xE4;   // qh[0]: elements 0, 32, 64, 96 get high bits 0, 1, 2, 3
  b[32] = 0x5A;        // ql[32]: element 32 low = 0xA, element 96 low = 0x5
  b[128 + 32 + 5] = 0x0C;  // second half qh[5]: element 128+32+5 gets high bits 3
  b[192 + 10] = 0xFE;      // scale of elements 160..175 = -2
  auto y = dequant(TensorType::Q6_K, b, 256);
  EXPECT_EQ(y[0], -32.f);
  EXPECT_EQ(y[32], 16 + 10 - 32.f);
  EXPECT_EQ(y[64], 0.f);
  EXPECT_EQ(y[96], 48 + 5 - 32.f);
  EXPECT_EQ(y[1], -32.f);
  EXPECT_EQ(y[128 + 32 + 5], -2.f * (48 - 32));
  EXPECT_EQ(y[128 + 32 + 6], -2.f * -32);
}

TEST(TensorType, DequantQ6_KHandBuilt) {
  std::vector<int> L(256);
  for (int e = 0; e < 256; ++e) L[e] = (e * 37 + 11) % 64;
  const int8_t sc[16] = {1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 11, 12, 13, 14, 15, 16};
  std::vector<uint8_t> b(210);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int* q = &L[128 * h + l];
      b[64 * h + l] = static_cast<uint8_t>((q[0] & 0xF) | ((q[64] & 0xF) << 4));
      b[64 * h + l + 32] = static_cast<uint8_t>((q[32] & 0xF) | ((q[96] & 0xF) << 4));
      b[128 + 32 * h + l] = static_cast<uint8_t>((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
    }
  }
  std::memcpy(b.data() + 192, sc, 16);
  put_u16(b, 208, 0x3000);  // d = 0.125
  auto y = dequant(TensorType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.125f * sc[e / 16] * (L[e] - 32)) << e;
}

// Round trip on random data (several scales of magnitude, ragged row counts): the error per
// element stays within a bound derived from the block's step size.
struct Bound {
  TensorType type;
  // max |err| allowed, as a fraction of the block's largest magnitude
  double rel_to_block_amax;
  // Largest |quant * sub-scale| the format multiplies by its fp16 d: when d is an fp16 subnormal
  // (tiny blocks) its absolute rounding error (2^-25) is scaled by this much.
  double d_multiplier = 0;
};

TEST(TensorType, QuantizeRoundTripWithinBound) {
  std::mt19937 rng(1234);
  const Bound bounds[] = {
      {TensorType::F32, 0.0},
      {TensorType::F16, 1.0 / 2048},      // half ulp of the largest element, or better
      {TensorType::BF16, 1.0 / 256},
      {TensorType::Q8_0, 1.0 / 254 + 1.0 / 1024, 127},  // half a step + fp16 rounding of d
      {TensorType::Q4_0, 1.0 / 8 + 1.0 / 512, 8},       // -max maps to +8, clamped to 7: one full step
      {TensorType::Q6_K, 1.0 / 32 + 1.0 / 100, 32 * 128},  // +max maps to 32, clamped to 31 + int8 scale rounding
      {TensorType::Q4_K, 2.0 / 30 + 2.0 / 60, 2 * 15 * 63},  // half a step of range/15 + 6-bit scale/min rounding
      {TensorType::Q4_1, 2.0 / 30 + 1.0 / 256, 16},          // half a step of range/15 + fp16 d and m
      {TensorType::Q5_1, 2.0 / 62 + 1.0 / 256, 32},
      {TensorType::Q5_0, 1.0 / 16 + 1.0 / 512, 16},          // -max maps to +16, clamped to 15: one full step
      {TensorType::Q5_K, 2.0 / 62 + 2.0 / 60, 2 * 31 * 63},
      {TensorType::Q3_K, 1.0 / 4 + 1.0 / 16, 4 * 32},        // one full step of max/4 + 6-bit scale rounding
      {TensorType::Q2_K, 2.0 / 6 + 2.0 / 15, 2 * 3 * 15},    // half a step of range/3 + 4-bit scale/min rounding
      // Non-uniform grid: the widest gap between neighbouring values is 24 of 127 (89..113), and
      // the least-squares scale may shrink max's value; max itself may then clip.
      {TensorType::IQ4_NL, 0.2, 127},
      {TensorType::IQ4_XS, 0.2 + 1.0 / 32, 127 * 32},
  };
  for (const auto& bnd : bounds) {
    const auto& info = tensor_type_info(bnd.type);
    const int64_t block = info.block_elems == 1 ? 32 : info.block_elems;
    for (int64_t nblocks : {1, 3, 7}) {
      for (float mag : {1e-3f, 1.f, 300.f}) {
        const int64_t n = block * nblocks + (info.block_elems == 1 ? 5 : 0);  // ragged for plain floats
        std::uniform_real_distribution<float> dist(-mag, mag);
        std::vector<float> x(n);
        for (auto& v : x) v = dist(rng);
        if (nblocks == 3) x[0] = mag * 3;  // an outlier
        std::vector<uint8_t> q(tensor_bytes(bnd.type, n));
        quantize_row(bnd.type, x.data(), q.data(), n);
        std::vector<float> y(n);
        dequantize_row(bnd.type, q.data(), y.data(), n);
        double sq = 0, sqx = 0;
        for (int64_t b0 = 0; b0 < n; b0 += block) {
          const int64_t e = std::min(n, b0 + block);
          float amax = 0;
          for (int64_t i = b0; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
          for (int64_t i = b0; i < e; ++i) {
            const double err = std::fabs(double(x[i]) - y[i]);
            const double allowed = bnd.type == TensorType::F16 || bnd.type == TensorType::BF16
                                       ? std::max(std::fabs(x[i]) * bnd.rel_to_block_amax * 1.0001,
                                                  std::ldexp(1.0, -25))  // fp16 subnormal step / 2
                                       : amax * bnd.rel_to_block_amax + bnd.d_multiplier * std::ldexp(1.0, -25);
            ASSERT_LE(err, allowed) << tensor_type_name(bnd.type) << " n=" << n << " mag=" << mag
                                    << " i=" << i << " x=" << x[i] << " y=" << y[i];
            sq += err * err;
            sqx += double(x[i]) * x[i];
          }
        }
        if (bnd.type != TensorType::F32) {
          EXPECT_GT(sq, 0.0) << "quantization should lose something";
        }
        // RMS error well below the signal: catches a quantizer that is merely "in bounds".
        const double rel_rms = std::sqrt(sq / sqx);
        double rms_limit = 0.01;
        switch (bnd.type) {
          case TensorType::Q4_0: case TensorType::Q4_K: case TensorType::Q4_1: case TensorType::IQ4_NL:
          case TensorType::IQ4_XS: rms_limit = 0.12; break;
          case TensorType::Q5_0: case TensorType::Q5_1: case TensorType::Q5_K: rms_limit = 0.06; break;
          case TensorType::Q3_K: rms_limit = 0.25; break;
          case TensorType::Q2_K: rms_limit = 0.4; break;
          case TensorType::Q6_K: rms_limit = 0.03; break;
          default: break;
        }
        EXPECT_LT(rel_rms, rms_limit) << tensor_type_name(bnd.type);
      }
    }
  }
}

TEST(TensorType, QuantizeZerosGivesZeros) {
  for (auto t : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_1,
                 TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K, TensorType::Q3_K,
                 TensorType::Q5_K, TensorType::IQ4_XS}) {
    std::vector<float> x(256, 0.f), y(256, 1.f);
    std::vector<uint8_t> q(tensor_bytes(t, 256));
    quantize_row(t, x.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.f) << tensor_type_name(t);
  }
}

TEST(Half, Fp16ToFp32Edges) {
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * std::ldexp(1.f, -24));
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.f, -14));
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.f);
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.f);
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7C00)) && fp16_to_fp32(0x7C00) > 0);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)) && fp16_to_fp32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)) && fp16_to_fp32(0x8000) == 0.f);
}

TEST(Half, Fp32ToFp16Rounding) {
  EXPECT_EQ(fp32_to_fp16(1.f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.f), 0x7BFF);       // below the midpoint to 2^16
  EXPECT_EQ(fp32_to_fp16(65520.f), 0x7C00);       // midpoint ties to even = inf
  EXPECT_EQ(fp32_to_fp16(1e9f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1.f + std::ldexp(1.f, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(fp32_to_fp16(1.f + 3 * std::ldexp(1.f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(fp32_to_fp16(1.f + std::ldexp(1.f, -11) + std::ldexp(1.f, -20)), 0x3C01);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -25)), 0x0000);             // tie -> even zero
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -25) * 1.001f), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * std::ldexp(1.f, -25)), 0x0002);          // tie -> even 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);          // rounds up into normals
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -14)), 0x0400);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.f, -30)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.f, -30)), 0x8000);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t n = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(n & 0x7C00, 0x7C00);
  EXPECT_NE(n & 0x3FF, 0);
  // A NaN whose payload lives only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::bit_cast<float>(0x7F800001u)))));
  // Every non-NaN half survives fp16 -> fp32 -> fp16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Half, Bf16) {
  EXPECT_EQ(fp32_to_bf16(1.f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(fp32_to_bf16(1.f + 3 * std::ldexp(1.f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_EQ(bf16_to_fp32(0x0001), std::bit_cast<float>(0x00010000u));  // subnormal kept
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x00010000u)), 0x0001);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace peregrine
