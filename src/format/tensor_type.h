#pragma once
// Element types of tensors as GGUF/ggml number them, with their exact block layouts.
// Quantized types store a row as consecutive blocks; a row's length must be a multiple of the
// type's block size. Layouts (bytes per block / elements per block):
//   F32 4/1, F16 2/1, BF16 2/1,
//   Q8_0 34/32   : fp16 d; int8 qs[32]                      x = d*q
//   Q4_0 18/32   : fp16 d; uint8 qs[16] (lo nibble = elems 0..15, hi = 16..31)  x = d*(q-8)
//   Q4_K 144/256 : fp16 d, dmin; uint8 scales[12] (6-bit scale/min per 32-elem sub-block); qs[128]
//   Q6_K 210/256 : uint8 ql[128], qh[64]; int8 scales[16]; fp16 d
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace peregrine {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q6_K = 14,
  BF16 = 30,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;   // as llama.cpp prints it: "f32", "q4_K", ...
  int64_t block_elems;     // elements per block (1 for plain floats)
  int64_t block_bytes;     // bytes per block
};

// Information for a raw GGUF type id, or nullopt if peregrine does not support that type.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t raw_type);
const TensorTypeInfo& tensor_type_info(TensorType type);
std::string_view tensor_type_name(TensorType type);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k" (case-insensitive).
std::optional<TensorType> parse_tensor_type(std::string_view name);

// Bytes for n elements of `type`; n must be a multiple of the block size (checked: throws
// std::invalid_argument otherwise). Overflow-checked: throws std::overflow_error.
size_t tensor_bytes(TensorType type, int64_t n);

// Converts n elements (n a multiple of the block size) between `type` and float32.
// dequantize_row is exact (it is the definition of the format); quantize_row is the reference
// quantizer (round-to-nearest with the scale choice llama.cpp's reference quantizers make).
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// Scalar half/bfloat conversions (round-to-nearest-even; NaN stays NaN).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace peregrine
