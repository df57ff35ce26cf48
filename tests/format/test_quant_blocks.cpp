// The block layouts of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K and IQ4_XS: blocks packed here
// by hand from ggml's format description (field offsets, bit positions) must decode to the
// format's formula exactly, and a few literal elements are spelled out.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "format/tensor_type.h"

namespace peregrine {
namespace {

constexpr int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

std::vector<float> dequant(TensorType t, const std::vector<uint8_t>& bytes, int64_t n) {
  EXPECT_EQ(bytes.size(), tensor_bytes(t, n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, bytes.data(), out.data(), n);
  return out;
}

// Element e (< 32) of a nibble array: low nibble of byte e for e < 16, high nibble of byte e - 16.
void put_nibble(std::vector<uint8_t>& b, size_t qs, int e, int v) {
  if (e < 16) {
    b[qs + e] = static_cast<uint8_t>((b[qs + e] & 0xF0) | v);
  } else {
    b[qs + e - 16] = static_cast<uint8_t>((b[qs + e - 16] & 0x0F) | (v << 4));
  }
}

// A deterministic but irregular value in [0, m).
int pattern(int e, int m) { return (e * 37 + 11) % m; }

TEST(QuantBlocks, Q4_1AndQ5_1) {
  for (bool five : {false, true}) {
    const TensorType t = five ? TensorType::Q5_1 : TensorType::Q4_1;
    const size_t bytes = five ? 24 : 20, qs = five ? 8 : 4;
    std::vector<uint8_t> b(bytes);
    put_u16(b, 0, 0x3800);  // d = 0.5
    put_u16(b, 2, 0xC100);  // m = -2.5
    uint32_t qh = 0;
    for (int e = 0; e < 32; ++e) {
      const int q = pattern(e, five ? 32 : 16);
      put_nibble(b, qs, e, q & 0xF);
      qh |= static_cast<uint32_t>(q >> 4) << e;
    }
    if (five) std::memcpy(b.data() + 4, &qh, 4);
    auto y = dequant(t, b, 32);
    for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.5f * pattern(e, five ? 32 : 16) - 2.5f) << e;
  }
}

TEST(QuantBlocks, Q5_0) {
  std::vector<uint8_t> b(22);
  put_u16(b, 0, 0xB400);  // d = -0.25
  uint32_t qh = 0;
  for (int e = 0; e < 32; ++e) {
    const int q = pattern(e, 32);
    put_nibble(b, 6, e, q & 0xF);
    qh |= static_cast<uint32_t>(q >> 4) << e;
  }
  std::memcpy(b.data() + 2, &qh, 4);
  auto y = dequant(TensorType::Q5_0, b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], -0.25f * (pattern(e, 32) - 16)) << e;
  EXPECT_EQ(y[0], -0.25f * (11 - 16));  // element 0: q = 11 (no fifth bit)
}

TEST(QuantBlocks, Iq4Nl) {
  std::vector<uint8_t> b(18 * 2);
  put_u16(b, 0, 0x3C00);   // block 0: d = 1
  put_u16(b, 18, 0x4000);  // block 1: d = 2
  for (int e = 0; e < 32; ++e) {
    put_nibble(b, 2, e, e % 16);
    put_nibble(b, 20, e, 15 - e % 16);
  }
  auto y = dequant(TensorType::IQ4_NL, b, 64);
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(y[e], static_cast<float>(kIq4[e % 16])) << e;
    EXPECT_EQ(y[32 + e], 2.f * kIq4[15 - e % 16]) << e;
  }
}

TEST(QuantBlocks, Q2_K) {
  std::vector<uint8_t> b(84);
  put_u16(b, 80, 0x3800);  // d = 0.5
  put_u16(b, 82, 0x3400);  // dmin = 0.25
  for (int g = 0; g < 16; ++g) b[g] = static_cast<uint8_t>(pattern(g, 16) | (pattern(g + 5, 16) << 4));
  // Element e = 128 h + 32 k + l: bits 2k of qs[32 h + l].
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    b[16 + 32 * h + l] |= static_cast<uint8_t>(pattern(e, 4) << (2 * k));
  }
  auto y = dequant(TensorType::Q2_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16;
    EXPECT_EQ(y[e], 0.5f * pattern(g, 16) * pattern(e, 4) - 0.25f * pattern(g + 5, 16)) << e;
  }
}

TEST(QuantBlocks, Q3_K) {
  std::vector<uint8_t> b(110);
  put_u16(b, 108, 0x3000);  // d = 0.125
  // Scales u = scale + 32 in 0..63: low nibbles of bytes 0..7 hold scales 0..7, high nibbles
  // scales 8..15; bits 2(i/4) of byte 8 + i%4 hold scale i's top two bits.
  for (int i = 0; i < 16; ++i) {
    const int u = pattern(i, 64);
    b[96 + i % 8] |= static_cast<uint8_t>((u & 0xF) << (4 * (i / 8)));
    b[96 + 8 + i % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (i / 4)));
  }
  // Element e (sub-block j = e / 32, l = e % 32): low bits at 2 (j % 4) of qs[32 (j / 4) + l],
  // the third bit at bit j of hmask[l]; w = low - 4 unless that bit is set.
  std::vector<int> w(256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32, v = pattern(e, 8);
    b[32 + 32 * (j / 4) + l] |= static_cast<uint8_t>((v & 3) << (2 * (j % 4)));
    b[l] |= static_cast<uint8_t>((v >> 2) << j);
    w[e] = (v & 3) - ((v >> 2) ? 0 : 4);
  }
  auto y = dequant(TensorType::Q3_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.125f * (pattern(e / 16, 64) - 32) * w[e]) << e;
}

TEST(QuantBlocks, Q5_K) {
  // Q4_K's scales (the same hand-packed bytes as tests/format/test_tensor_type.cpp's Q4_K test).
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 5};
  const int mn[8] = {0, 4, 60, 7, 20, 63, 1, 40};
  const uint8_t packed[12] = {0x41, 0x82, 0xC3, 0x3F, 0x40, 0xC4, 0x3C, 0x87, 0x41, 0xF1, 0x10, 0x85};
  std::vector<uint8_t> b(176);
  put_u16(b, 0, 0x3800);  // d = 0.5
  put_u16(b, 2, 0x3400);  // dmin = 0.25
  std::memcpy(b.data() + 4, packed, 12);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32, q = pattern(e, 32);
    b[48 + 32 * (j / 2) + l] |= static_cast<uint8_t>((q & 0xF) << (4 * (j % 2)));
    b[16 + l] |= static_cast<uint8_t>((q >> 4) << j);
  }
  auto y = dequant(TensorType::Q5_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.5f * sc[e / 32] * pattern(e, 32) - 0.25f * mn[e / 32]) << e;
}

TEST(QuantBlocks, Iq4Xs) {
  std::vector<uint8_t> b(136);
  put_u16(b, 0, 0x3400);  // d = 0.25
  uint16_t scales_h = 0;
  for (int j = 0; j < 8; ++j) {
    const int u = pattern(j, 64);
    b[4 + j / 2] |= static_cast<uint8_t>((u & 0xF) << (4 * (j % 2)));
    scales_h = static_cast<uint16_t>(scales_h | ((u >> 4) << (2 * j)));
  }
  put_u16(b, 2, scales_h);
  for (int e = 0; e < 256; ++e) put_nibble(b, 8 + 16 * (e / 32), e % 32, pattern(e, 16));
  auto y = dequant(TensorType::IQ4_XS, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.25f * (pattern(e / 32, 64) - 32) * kIq4[pattern(e, 16)]) << e;
}

}  // namespace
}  // namespace peregrine
