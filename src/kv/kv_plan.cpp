#include "kv/kv_plan.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace peregrine {

int64_t parse_memory_size(std::string_view text) {
  const std::string original(text);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (i == 0 || ec != std::errc() || ptr != text.data() + i) {
    throw UsageError("memory size '" + original + "': expected a number with an optional unit such as 2GiB");
  }
  std::string unit;
  for (char c : text.substr(i)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else throw UsageError("memory size '" + original + "': unknown unit '" + unit + "' (use B, KiB, MiB, GiB, KB, MB, GB)");
  const double bytes = std::floor(value * scale);
  if (!(bytes >= 1) || bytes > 1024.0 * 1024 * 1024 * 1024) {
    throw UsageError("memory size '" + original + "' is out of range (1 byte to 1 TiB)");
  }
  return static_cast<int64_t>(bytes);
}

KvPlan plan_kv_cache(const ModelConfig& config, KvType type, int64_t budget_bytes, int32_t block_size) {
  if (block_size < 1 || block_size > 65536) throw UsageError("KV plan: block size out of range [1, 65536]");
  KvPlan p;
  p.block_size = block_size;
  p.bytes_per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim * static_cast<int64_t>(kv_type_bytes(type));
  if (p.bytes_per_token <= 0) throw UsageError("KV plan: model config has no layers / KV heads");
  const int64_t block_bytes = p.bytes_per_token * block_size;
  p.n_blocks = budget_bytes / block_bytes;
  if (p.n_blocks < 1) {
    throw UsageError("KV plan: a budget of " + std::to_string(budget_bytes) + " bytes holds no block of " +
                     std::to_string(block_size) + " tokens (" + std::to_string(block_bytes) + " bytes)");
  }
  p.tokens = p.n_blocks * block_size;
  p.bytes = p.n_blocks * block_bytes;
  p.full_sequences = config.context_length > 0 ? p.tokens / config.context_length : 0;
  return p;
}

std::string describe_kv_plan(const KvPlan& plan, KvType type, int64_t context_length) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "KV cache: %.2f GiB %s, %lld blocks x %d = %lld tokens, %lld full-length (%lld) sequences",
                static_cast<double>(plan.bytes) / (1024.0 * 1024 * 1024), std::string(kv_type_name(type)).c_str(),
                static_cast<long long>(plan.n_blocks), plan.block_size, static_cast<long long>(plan.tokens),
                static_cast<long long>(plan.full_sequences), static_cast<long long>(context_length));
  return buf;
}

}  // namespace peregrine
