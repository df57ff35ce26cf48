#pragma once
// Shared inputs for the kernel tests: random (never all-zero) vectors and weight matrices of
// any tensor type, quantized with the format module's reference quantizer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "format/model_file.h"
#include "format/tensor_type.h"
#include "kernels/int8_dot.h"

namespace peregrine::test {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

// n_tokens rows of n random activations in [-2, 2), each quantized to n / 32 Q8 blocks (the
// activations every integer kernel multiplies).
inline std::vector<Q8Block> quantized_tokens(int64_t n_tokens, int64_t n, uint32_t seed) {
  auto x = random_vec(static_cast<size_t>(n_tokens * n), seed, -2.f, 2.f);
  std::vector<Q8Block> q(static_cast<size_t>(n_tokens * (n / 32)));
  for (int64_t t = 0; t < n_tokens; ++t) quantize_q8_blocks(x.data() + t * n, q.data() + t * (n / 32), n);
  return q;
}

// A weight matrix {n_in, n_out} of `type` that owns its bytes; `view` points into them.
struct Weight {
  std::vector<std::byte> bytes;
  TensorView view;
};

inline Weight make_weight(TensorType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  Weight w;
  auto f = random_vec(static_cast<size_t>(n_in * n_out), seed);
  w.bytes.resize(tensor_bytes(type, n_in * n_out));
  const size_t row_bytes = tensor_bytes(type, n_in);
  for (int64_t r = 0; r < n_out; ++r) quantize_row(type, f.data() + r * n_in, w.bytes.data() + r * row_bytes, n_in);
  w.view.name = "w";
  w.view.type = type;
  w.view.shape = {n_in, n_out};
  w.view.data = w.bytes;
  return w;
}

inline constexpr TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q8_0,
                                           TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K,   TensorType::Q4_1,
                                           TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K,
                                           TensorType::Q3_K, TensorType::Q5_K, TensorType::IQ4_XS};

// The quantized types (every one has the integer Q8 path).
inline constexpr TensorType kQuantTypes[] = {
    TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL,
    TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS};

// (type, blocks of 32 per row) for the integer kernel tests: every quantized type with 40 blocks
// (5 K-quant super-blocks, not a multiple of 16 blocks), and the 32-weight types also with an odd 41.
struct Int8RowCase {
  TensorType type;
  int64_t n_blocks;
};
inline std::vector<Int8RowCase> int8_row_cases() {
  std::vector<Int8RowCase> cases;
  for (TensorType type : kQuantTypes) {
    cases.push_back({type, 40});
    if (tensor_type_info(type).block_elems == 32) cases.push_back({type, 41});
  }
  return cases;
}

// Byte offsets of a block's f16 fields (d, and m or dmin where the type has one).
inline std::vector<size_t> half_field_offsets(TensorType type) {
  switch (type) {
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      return {0, 2};
    case TensorType::Q6_K:
      return {208};
    case TensorType::Q2_K:
      return {80, 82};
    case TensorType::Q3_K:
      return {108};
    default:
      return {0};
  }
}

// n_rows rows of a quantized `type` with arbitrary bits, not only what our quantizer writes
// (every scale and min field, every sign, Q8_0's -128), with finite f16 fields.
inline std::vector<std::byte> random_bit_rows(TensorType type, int64_t n, int64_t n_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> bytes(tensor_bytes(type, n * n_rows));
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
  const size_t block_bytes = static_cast<size_t>(tensor_type_info(type).block_bytes);
  for (size_t blk = 0; blk < bytes.size() / block_bytes; ++blk) {
    for (size_t at : half_field_offsets(type)) {
      // Random sign and mantissa, exponent field 0..29 (subnormals included, no inf/NaN).
      const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | ((rng() % 30) << 10));
      std::memcpy(&bytes[blk * block_bytes + at], &h, 2);
    }
  }
  return bytes;
}

}  // namespace peregrine::test
