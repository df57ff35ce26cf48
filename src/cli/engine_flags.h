#pragma once
// The serving engine's flags, shared by the commands that run one (`serve`, `bench-serve`):
// compute threads, KV cache budget and element type, batch limits and prefix caching. One place
// registers them, validates them and turns them into an EngineConfig with the KV cache sizing printed.
#include <cstdint>
#include <string>
#include <string_view>

#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/dist_flags.h"
#include "cli/spec_flags.h"
#include "engine/engine_core.h"
#include "model/model.h"

namespace peregrine::cli {

// --max-step-ms's value: "auto" -> kAutoStepBudget, else milliseconds in [0, 1e6]; UsageError otherwise.
double parse_max_step_ms(const std::string& text);

struct EngineFlags {
  BackendFlags backend;              // --backend, -t/--threads
  std::string kv_memory = "2GiB";
  std::string kv_type = "f16";
  int64_t max_seqs = 64;
  int64_t max_batched_tokens = 512;
  bool no_prefix_caching = false;
  std::string max_step_ms = "auto";  // "auto" (a budget derived from step costs), MS, or 0 (fixed chunks)
  SpecFlags spec;
  DistFlags dist;

  // Registers --backend, -t/--threads, --kv-cache-memory, --kv-type, --max-seqs, --max-batched-tokens,
  // --no-prefix-caching, the speculation flags and the layout flags (--tp, --pp, ...) with their
  // current values as defaults.
  void add_to(ArgParser& parser);

  // Validates the flags and plans the KV cache for `model`: as many blocks as the memory budget
  // holds, but never more than 4 x max_seqs full-context sequences need (a small model would
  // otherwise zero gigabytes it cannot use). Prints the plan to stderr after `log_prefix`.
  // Throws UsageError for a bad value.
  // On a layout (--tp, --pp) the budget is per process and the cache each process keeps is its
  // shard (its KV heads and layers; the largest stage's), so the same budget holds more blocks.
  EngineConfig engine_config(const ModelConfig& model, std::string_view log_prefix) const;
  // The same, with the speculation flags' proposer for `model` (`model_path`: its MODEL argument,
  // nullopt for the embedded demo model).
  EngineConfig engine_config(const Model& model, const std::optional<std::string>& model_path,
                             std::string_view log_prefix) const;
};

}  // namespace peregrine::cli
