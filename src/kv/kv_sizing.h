#pragma once
// Sizing the KV cache from a memory budget: how many blocks fit, and what they hold in tokens
// and in full-length sequences (printed at start-up by the serving commands).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kv/kv_type.h"

namespace peregrine {

struct KvSizing {
  int64_t n_blocks = 0;
  int32_t block_size = 16;
  int64_t bytes_per_token = 0;   // K and V of all layers
  int64_t bytes = 0;             // n_blocks * block_size * bytes_per_token
  int64_t tokens = 0;            // n_blocks * block_size
  int64_t full_sequences = 0;    // tokens / context_length (sequences of the full context)
};

// "2GiB", "512MiB", "1.5GB", "64K", "1000000" (bytes). Binary and decimal suffixes, any case.
// Throws UsageError for anything else, zero, or more than 1 TiB.
int64_t parse_memory_size(std::string_view text);

// A budget given as a share of the memory available now: "0.9" or "90%". Returns nullopt for an
// absolute size (a number with a unit, or a whole number of bytes >= 2); throws UsageError for
// a fraction outside (0, 1] ("0", "1.5", "120%", "-0.5"). A unitless "1" is the whole of it.
std::optional<double> parse_memory_fraction(std::string_view text);

// MemAvailable from a /proc/meminfo-format file, in bytes. Throws UsageError if the file cannot
// be read or has no valid MemAvailable line.
int64_t read_mem_available(const std::string& meminfo_path = "/proc/meminfo");

// --kv-cache-memory resolved to bytes: an absolute size as parse_memory_size, or a fraction of
// MemAvailable (read only then).
struct MemoryBudget {
  int64_t bytes = 0;
  std::optional<double> fraction;  // set when given as a share of available memory
  int64_t available = 0;           // MemAvailable used for the fraction
  // "2.00 GiB" or "90% of 11.20 GiB available (MemAvailable) = 10.08 GiB".
  std::string describe() const;
};
MemoryBudget resolve_memory_budget(std::string_view text, const std::string& meminfo_path = "/proc/meminfo");

// Blocks of `block_size` tokens that fit in `budget_bytes`. Throws UsageError if not even one
// block fits, or if the model's head dimension cannot be stored as `type` (Q8_0: multiple of 32).
KvSizing size_kv_cache(const KvShape& shape, int64_t context_length, KvType type, int64_t budget_bytes, int32_t block_size = 16);

// One line: "KV cache: 2.00 GiB f16, 5958 blocks x 16 = 95328 tokens, 46 full-length (2048) sequences".
std::string describe_kv_sizing(const KvSizing& sizing, KvType type, int64_t context_length);

}  // namespace peregrine
