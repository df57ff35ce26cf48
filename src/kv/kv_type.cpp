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
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16}) {
    if (lower == kv_type_name(t)) return t;
  }
  return std::nullopt;
}

size_t kv_type_bytes(KvType t) { return t == KvType::F32 ? 4 : 2; }

}  // namespace peregrine
