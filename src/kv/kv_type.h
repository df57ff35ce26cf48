#pragma once
// Element type of the KV cache. F16 halves the memory of F32 at a small accuracy cost; BF16 keeps
// F32's range with less mantissa. Q8_0 halves F16 again: each (position, KV head) row of head_dim
// values is stored as blocks of 32 int8 with one f16 scale per block (34 bytes per 32 values,
// 1.0625 bytes per value), the layout of GGUF's Q8_0 weights split into two arrays (kv/kv_q8.h).
// FP8_E4M3 stores each value as an 8-bit float (1 sign, 4 exponent, 3 mantissa bits, the OCP
// E4M3 "FN" format of GPUs' FP8) with one f16 scale per row (per position and KV head): head_dim
// + 2 bytes a row (kv/kv_fp8.h). Q4_0 stores blocks of 32 4-bit values with one f16 scale each
// (18 bytes per 32, 0.5625 bytes per value; kv/kv_q4.h). A head dimension that is not a multiple
// of 32 (the small demo models' 8, Phi-2's 80) gives Q8_0 and Q4_0 one scale per row instead. The quantized types keep their values in
// one byte array and their scales in another: value `off` of a layer (an element offset) has its
// bytes at kv_value_byte(type, off) and its scale at off / kv_scale_group(type, head_dim).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace peregrine {

enum class KvType { F32, F16, BF16, Q8_0, FP8_E4M3, Q4_0 };

// What the cache stores per token: K and V rows of n_kv_heads x head_dim values in each of
// n_layers layers. A model gives its own (ModelConfig::kv_shape); a partial model (a layer
// range, a slice of the KV heads) gives a smaller one.
struct KvShape {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

inline constexpr int64_t kKvQ8Block = 32;  // values per Q8_0 or Q4_0 scale

// "f32" | "f16" | "bf16" | "q8_0" | "fp8_e4m3" | "q4_0"
std::string_view kv_type_name(KvType t);
// Case-insensitive; "fp8" is FP8_E4M3 (vLLM's name).
std::optional<KvType> parse_kv_type(std::string_view name);
// "f16, bf16, f32, q8_0, fp8_e4m3 or q4_0": for help texts and error messages (no parentheses:
// bench/quality_table.py reads the list from --help).
std::string_view kv_type_choices();
// Whether values are stored as bytes plus scales (Q8_0, FP8_E4M3, Q4_0).
bool kv_type_is_quantized(KvType t);
// How many consecutive values of a row share one scale: 32 for Q8_0 and Q4_0 (the whole row when
// head_dim is not a multiple of 32), the whole row for FP8_E4M3; 0 for the float types.
int64_t kv_scale_group(KvType t, int64_t head_dim);
// Byte offset, in a quantized type's value array, of the value at element offset `off`
// (Q4_0 packs two values a byte; `off` is even wherever a row or block starts).
inline size_t kv_value_byte(KvType t, size_t off) { return t == KvType::Q4_0 ? off / 2 : off; }
// Bytes of one row of `n` values (one position of one KV head, n = head_dim), scales included.
size_t kv_row_bytes(KvType t, int64_t n);
// Average bytes per value of a row of head_dim values, scales included (4, 2, 2, 1.0625;
// FP8_E4M3 1 + 2 / head_dim; Q4_0 0.5625; a row-scaled Q8_0 or Q4_0 1 or 0.5 + 2 / head_dim):
// for sizes and reports.
double kv_bytes_per_value(KvType t, int64_t head_dim);
// Whether a head dimension can be stored as `t` (Q4_0 needs an even one).
bool kv_type_supports_head_dim(KvType t, int64_t head_dim);

}  // namespace peregrine
