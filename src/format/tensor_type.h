#pragma once
// Element types of tensors as GGUF/ggml number them, with their exact block layouts.
// Quantized types store a row as consecutive blocks; a row's length must be a multiple of the
// type's block size. Layouts (bytes per block / elements per block):
//   F32 4/1, F16 2/1, BF16 2/1,
//   Q8_0 34/32    : fp16 d; int8 qs[32]                      x = d*q
//   Q4_0 18/32    : fp16 d; uint8 qs[16] (lo nibble = elems 0..15, hi = 16..31)  x = d*(q-8)
//   Q4_1 20/32    : fp16 d, m; qs[16] as Q4_0                x = d*q + m
//   Q5_0 22/32    : fp16 d; uint8 qh[4] (bit j = elem j's 5th bit); qs[16] as Q4_0  x = d*(q-16)
//   Q5_1 24/32    : fp16 d, m; qh[4]; qs[16] as Q5_0          x = d*q + m
//   IQ4_NL 18/32  : fp16 d; qs[16] as Q4_0                    x = d*kIq4nlValues[q]
//   Q2_K 84/256   : uint8 scales[16] (lo nibble scale, hi nibble min, per 16 elems); qs[64] (2 bits);
//                   fp16 d, dmin                              x = d*sc*q - dmin*m
//   Q3_K 110/256  : uint8 hmask[32] (3rd bit), qs[64] (2 bits); scales[12] (16 six-bit scales,
//                   offset 32); fp16 d                        x = d*(sc-32)*(q - (hbit ? 0 : 4))
//   Q4_K 144/256  : fp16 d, dmin; uint8 scales[12] (6-bit scale/min per 32-elem sub-block); qs[128]
//   Q5_K 176/256  : fp16 d, dmin; scales[12] as Q4_K; qh[32] (5th bit); qs[128] as Q4_K
//   Q6_K 210/256  : uint8 ql[128], qh[64]; int8 scales[16]; fp16 d
//   IQ4_XS 136/256: fp16 d; uint16 scales_h; uint8 scales_l[4] (6-bit scale per 32, offset 32);
//                   qs[128] (per 32: 16 bytes as Q4_0)       x = d*(sc-32)*kIq4nlValues[q]
// (format/quant_blocks.h has the bit positions of each.)
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
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  // Kernel layouts (kernels/int8_layout.h): made at load from a file's matrices for the kernels
  // of one path, never read from or written to a file (tensor_type_info(raw) and
  // parse_tensor_type do not know them).
  Q4_0_X16 = 1002,
  Q8_0_X16 = 1008,
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
// Parses a type's name as tensor_type_name gives it ("f32", "q4_0", "q5_k", "iq4_nl", ...),
// case-insensitive.
std::optional<TensorType> parse_tensor_type(std::string_view name);

// Bytes for n elements of `type`; n must be a multiple of the block size (checked: throws
// std::invalid_argument otherwise). Overflow-checked: throws std::overflow_error.
size_t tensor_bytes(TensorType type, int64_t n);

// Converts n elements (n a multiple of the block size) between `type` and float32.
// dequantize_row is exact (it is the definition of the format, ggml's arithmetic operation for
// operation); quantize_row is our reference quantizer (round-to-nearest with a simple scale
// choice per block, not llama.cpp's iterative searches: files differ from llama-quantize's, but
// any reader decodes them the same way).
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// Scalar half/bfloat conversions (round-to-nearest-even; NaN stays NaN).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace peregrine
