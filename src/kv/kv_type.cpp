#include "kv/kv_type.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace peregrine {

std::string_view kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::BF16: return "bf16";
    case KvType::Q8_0: return "q8_0";
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    if (lower == kv_type_name(t)) return t;
  }
  return std::nullopt;
}

std::string_view kv_type_choices() { return "f16, bf16, f32 or q8_0"; }

size_t kv_row_bytes(KvType t, int64_t n) {
  const size_t un = static_cast<size_t>(std::max<int64_t>(n, 0));
  switch (t) {
    case KvType::F32: return 4 * un;
    case KvType::F16:
    case KvType::BF16: return 2 * un;
    case KvType::Q8_0: {
      const size_t blocks = (un + kKvQ8Block - 1) / kKvQ8Block;
      return blocks * (kKvQ8Block + sizeof(uint16_t));  // int8 values + one f16 scale per block
    }
  }
  return 0;
}

double kv_bytes_per_value(KvType t) {
  return static_cast<double>(kv_row_bytes(t, kKvQ8Block)) / static_cast<double>(kKvQ8Block);
}

bool kv_type_supports_head_dim(KvType t, int64_t head_dim) {
  return head_dim > 0 && (t != KvType::Q8_0 || head_dim % kKvQ8Block == 0);
}

}  // namespace peregrine
