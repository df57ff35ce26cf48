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
    case KvType::FP8_E4M3: return "fp8_e4m3";
    case KvType::Q4_0: return "q4_0";
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "fp8") return KvType::FP8_E4M3;
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0, KvType::FP8_E4M3, KvType::Q4_0}) {
    if (lower == kv_type_name(t)) return t;
  }
  return std::nullopt;
}

std::string_view kv_type_choices() { return "f16, bf16, f32, q8_0, fp8_e4m3 or q4_0"; }

bool kv_type_is_quantized(KvType t) { return t == KvType::Q8_0 || t == KvType::FP8_E4M3 || t == KvType::Q4_0; }

int64_t kv_scale_group(KvType t, int64_t head_dim) {
  switch (t) {
    case KvType::Q8_0:
    case KvType::Q4_0: return head_dim % kKvQ8Block == 0 ? kKvQ8Block : head_dim;  // small heads: one a row
    case KvType::FP8_E4M3: return head_dim;
    default: return 0;
  }
}

size_t kv_row_bytes(KvType t, int64_t n) {
  const size_t un = static_cast<size_t>(std::max<int64_t>(n, 0));
  switch (t) {
    case KvType::F32: return 4 * un;
    case KvType::F16:
    case KvType::BF16: return 2 * un;
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0: {
      // The values' bytes (Q4_0: two a byte) plus one f16 scale per group.
      const size_t group = static_cast<size_t>(std::max<int64_t>(kv_scale_group(t, n), 1));
      return kv_value_byte(t, un + (t == KvType::Q4_0 ? un % 2 : 0)) + (un + group - 1) / group * sizeof(uint16_t);
    }
  }
  return 0;
}

double kv_bytes_per_value(KvType t, int64_t head_dim) {
  const int64_t n = std::max<int64_t>(head_dim, 1);
  return static_cast<double>(kv_row_bytes(t, n)) / static_cast<double>(n);
}

bool kv_type_supports_head_dim(KvType t, int64_t head_dim) {
  return head_dim > 0 && (t != KvType::Q4_0 || head_dim % 2 == 0);
}

}  // namespace peregrine
