#include "kv/kv_sizing.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "util/error.h"

namespace peregrine {
namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace

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

std::optional<double> parse_memory_fraction(std::string_view text) {
  const std::string original(text);
  const bool percent = !text.empty() && text.back() == '%';
  std::string_view number = percent ? text.substr(0, text.size() - 1) : text;
  const bool negative = !number.empty() && number.front() == '-';
  if (negative) number.remove_prefix(1);
  const bool plain = !number.empty() && number.find_first_not_of("0123456789.") == std::string_view::npos;
  const std::string expected = "memory share '" + original + "': expected a fraction such as 0.9 or a percentage such as 90%";
  if (!plain) {
    if (percent) throw UsageError(expected);
    return std::nullopt;  // a size with a unit (or garbage): parse_memory_size's business
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) throw UsageError(expected);
  // A whole number of bytes (>= 2) without a unit stays an absolute size, as it always was.
  const bool whole = number.find('.') == std::string_view::npos;
  if (!percent && !negative && whole && value >= 2) return std::nullopt;
  const double fraction = (negative ? -value : value) / (percent ? 100.0 : 1.0);
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw UsageError("memory share '" + original + "' is not in (0, 1] (0.9 or 90% means 90% of the available memory)");
  }
  return fraction;
}

int64_t read_mem_available(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  if (!in) throw UsageError("cannot read " + meminfo_path + " to size a memory share; give an absolute size such as 2GiB");
  std::string line;
  while (std::getline(in, line)) {
    constexpr std::string_view kKey = "MemAvailable:";
    if (line.rfind(kKey, 0) != 0) continue;
    // "MemAvailable:   12345678 kB"
    std::string_view rest = std::string_view(line).substr(kKey.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    int64_t kib = 0;
    const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
    const std::string_view unit = std::string_view(ptr, static_cast<size_t>(rest.data() + rest.size() - ptr));
    if (ec != std::errc() || kib <= 0 || kib > (int64_t{1} << 40) || (unit != " kB" && unit != " KB")) {
      throw UsageError("cannot parse '" + line + "' in " + meminfo_path + "; give an absolute size such as 2GiB");
    }
    return kib * 1024;
  }
  throw UsageError(meminfo_path + " has no MemAvailable line; give an absolute size such as 2GiB");
}

std::string MemoryBudget::describe() const {
  if (!fraction) return gib(static_cast<double>(bytes));
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.4g%% of %s available (MemAvailable) = %s", *fraction * 100.0,
                gib(static_cast<double>(available)).c_str(), gib(static_cast<double>(bytes)).c_str());
  return buf;
}

MemoryBudget resolve_memory_budget(std::string_view text, const std::string& meminfo_path) {
  MemoryBudget b;
  b.fraction = parse_memory_fraction(text);
  if (!b.fraction) {
    b.bytes = parse_memory_size(text);
    return b;
  }
  b.available = read_mem_available(meminfo_path);
  b.bytes = static_cast<int64_t>(std::floor(*b.fraction * static_cast<double>(b.available)));
  if (b.bytes < 1) throw UsageError("memory share '" + std::string(text) + "' of " + gib(static_cast<double>(b.available)) + " is empty");
  return b;
}

KvSizing size_kv_cache(const KvShape& shape, int64_t context_length, KvType type, int64_t budget_bytes, int32_t block_size) {
  if (block_size < 1 || block_size > 65536) throw UsageError("KV cache sizing: block size out of range [1, 65536]");
  if (shape.head_dim > 0 && !kv_type_supports_head_dim(type, shape.head_dim)) {
    throw UsageError("KV cache sizing: type " + std::string(kv_type_name(type)) + " needs an even head dimension; this model's is " +
                     std::to_string(shape.head_dim) + " (use --kv-type f16)");
  }
  KvSizing p;
  p.block_size = block_size;
  p.bytes_per_token = 2 * shape.n_layers * shape.n_kv_heads * static_cast<int64_t>(kv_row_bytes(type, shape.head_dim));
  if (p.bytes_per_token <= 0) throw UsageError("KV cache sizing: model config has no layers / KV heads");
  const int64_t block_bytes = p.bytes_per_token * block_size;
  p.n_blocks = budget_bytes / block_bytes;
  if (p.n_blocks < 1) {
    throw UsageError("KV cache sizing: a budget of " + std::to_string(budget_bytes) + " bytes holds no block of " +
                     std::to_string(block_size) + " tokens (" + std::to_string(block_bytes) + " bytes)");
  }
  p.tokens = p.n_blocks * block_size;
  p.bytes = p.n_blocks * block_bytes;
  p.full_sequences = context_length > 0 ? p.tokens / context_length : 0;
  return p;
}

std::string describe_kv_sizing(const KvSizing& sizing, KvType type, int64_t context_length) {
  char buf[256];
  const bool small = sizing.bytes < (int64_t{1} << 30);  // "0.00 GiB" says nothing about a test-sized cache
  std::snprintf(buf, sizeof buf, "KV cache: %.2f %s %s, %lld blocks x %d = %lld tokens, %lld full-length (%lld) sequences",
                static_cast<double>(sizing.bytes) / (small ? 1024.0 * 1024 : 1024.0 * 1024 * 1024), small ? "MiB" : "GiB",
                std::string(kv_type_name(type)).c_str(),
                static_cast<long long>(sizing.n_blocks), sizing.block_size, static_cast<long long>(sizing.tokens),
                static_cast<long long>(sizing.full_sequences), static_cast<long long>(context_length));
  return buf;
}

}  // namespace peregrine
