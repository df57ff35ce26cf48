#pragma once
// Element type of the KV cache. F16 halves the memory of F32 at a small accuracy cost; BF16 keeps
// F32's range with less mantissa.
#include <cstddef>
#include <optional>
#include <string_view>

namespace peregrine {

enum class KvType { F32, F16, BF16 };

std::string_view kv_type_name(KvType t);                    // "f32" | "f16" | "bf16"
std::optional<KvType> parse_kv_type(std::string_view name);  // case-insensitive
size_t kv_type_bytes(KvType t);                              // bytes per element

}  // namespace peregrine
