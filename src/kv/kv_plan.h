#pragma once
// Sizing the KV cache from a memory budget: how many blocks fit, and what they hold in tokens
// and in full-length sequences (printed at start-up by the serving commands).
#include <cstdint>
#include <string>
#include <string_view>

#include "kv/kv_type.h"
#include "model/config.h"

namespace peregrine {

struct KvPlan {
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

// Blocks of `block_size` tokens that fit in `budget_bytes`. Throws UsageError if not even one
// block fits.
KvPlan plan_kv_cache(const ModelConfig& config, KvType type, int64_t budget_bytes, int32_t block_size = 16);

// One line: "KV cache: 2.00 GiB f16, 5958 blocks x 16 = 95328 tokens, 46 full-length (2048) sequences".
std::string describe_kv_plan(const KvPlan& plan, KvType type, int64_t context_length);

}  // namespace peregrine
