#pragma once
// Element type of the KV cache. F16 halves the memory of F32 at a small accuracy cost; BF16 keeps
// F32's range with less mantissa. Q8_0 halves F16 again: each (position, KV head) row of head_dim
// values is stored as blocks of 32 int8 with one f16 scale per block (34 bytes per 32 values,
// 1.0625 bytes per value), the layout of GGUF's Q8_0 weights split into two arrays.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace peregrine {

enum class KvType { F32, F16, BF16, Q8_0 };

// What the cache stores per token: K and V rows of n_kv_heads x head_dim values in each of
// n_layers layers. A model gives its own (ModelConfig::kv_shape); a partial model (a layer
// range, a slice of the KV heads) gives a smaller one.
struct KvShape {
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

inline constexpr int64_t kKvQ8Block = 32;  // values per Q8_0 scale

std::string_view kv_type_name(KvType t);                    // "f32" | "f16" | "bf16" | "q8_0"
std::optional<KvType> parse_kv_type(std::string_view name);  // case-insensitive
// "f16, bf16, f32 or q8_0": for help texts and error messages.
std::string_view kv_type_choices();
// Bytes of one row of `n` values (one position of one KV head, n = head_dim), scales included.
// For Q8_0, n must be a multiple of kKvQ8Block (KvCache checks it); a partial block is counted
// as a whole one.
size_t kv_row_bytes(KvType t, int64_t n);
// Average bytes per value, scales included (4, 2, 2, 1.0625): for sizes and reports.
double kv_bytes_per_value(KvType t);
// Whether a head dimension can be stored as `t` (Q8_0 needs whole blocks of 32).
bool kv_type_supports_head_dim(KvType t, int64_t head_dim);

}  // namespace peregrine
