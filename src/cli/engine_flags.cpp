#include "cli/engine_flags.h"

#include <algorithm>
#include <cstdio>

#include "kv/kv_sizing.h"
#include "util/error.h"

namespace peregrine::cli {

void EngineFlags::add_to(ArgParser& p) {
  backend.add_to(p);
  p.option("--kv-cache-memory", &kv_memory, "SIZE",
           "KV cache budget: a size (2GiB) or a share of available memory (0.9, 90%); capped at 4 x max-seqs "
           "full-context sequences");
  p.option("--kv-type", &kv_type, "TYPE", "KV cache element type: " + std::string(kv_type_choices()));
  p.option("--max-seqs", &max_seqs, "N", "sequences per forward pass (the max batch)", 1, 1 << 16);
  p.option("--max-batched-tokens", &max_batched_tokens, "N", "tokens per forward pass", 1, 1 << 20);
  p.flag("--no-prefix-caching", &no_prefix_caching, "turn prefix caching off");
  p.option("--max-step-ms", &max_step_ms, "MS",
           "decode priority: size prefill chunks so a step takes about MS (learned step costs); 0 = fixed chunks of "
           "--max-batched-tokens (prefill priority)",
           0, 1e6);
  spec.add_to(p);
  dist.add_to(p);
}

EngineConfig EngineFlags::engine_config(const ModelConfig& model, std::string_view log_prefix) const {
  const auto type = parse_kv_type(kv_type);
  if (!type) throw UsageError("unknown --kv-type '" + kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  const MemoryBudget budget = resolve_memory_budget(kv_memory);
  if (budget.fraction) {
    std::fprintf(stderr, "%.*sKV cache budget: %s\n", static_cast<int>(log_prefix.size()), log_prefix.data(),
                 budget.describe().c_str());
  }
  KvSizing sizing = size_kv_cache(dist::largest_shard_kv(model, dist.layout()), model.context_length, *type, budget.bytes);
  const int64_t blocks_per_sequence = (model.context_length + sizing.block_size - 1) / sizing.block_size;
  const int64_t useful = 4 * max_seqs * blocks_per_sequence;
  bool capped = false;
  if (sizing.n_blocks > useful) {
    capped = true;
    sizing.n_blocks = useful;
    sizing.tokens = sizing.n_blocks * sizing.block_size;
    sizing.bytes = sizing.tokens * sizing.bytes_per_token;
    sizing.full_sequences = model.context_length > 0 ? sizing.tokens / model.context_length : 0;
  }
  std::fprintf(stderr, "%.*s%s%s\n", static_cast<int>(log_prefix.size()), log_prefix.data(),
               describe_kv_sizing(sizing, *type, model.context_length).c_str(),
               capped ? " (capped at 4 x --max-seqs full-length sequences)" : "");
  EngineConfig cfg;
  cfg.kv_type = *type;
  cfg.kv_blocks = sizing.n_blocks;
  cfg.block_size = sizing.block_size;
  cfg.prefix_caching = !no_prefix_caching;
  cfg.scheduler.max_batched_tokens = max_batched_tokens;
  cfg.scheduler.max_seqs = max_seqs;
  cfg.max_step_ms = max_step_ms;
  return cfg;
}

EngineConfig EngineFlags::engine_config(const Model& model, const std::optional<std::string>& model_path,
                                        std::string_view log_prefix) const {
  EngineConfig cfg = engine_config(model.config(), log_prefix);
  if (spec.enabled()) {
    spec.apply(cfg, spec.make_proposer(model, model_path, cfg.kv_blocks * cfg.block_size));
    std::fprintf(stderr, "%.*sspeculative decoding: %s, %lld tokens per step, up to %lld sequences decoding\n",
                 static_cast<int>(log_prefix.size()), log_prefix.data(), spec.proposer_name().c_str(),
                 static_cast<long long>(spec.tokens), static_cast<long long>(spec.max_batch));
  }
  return cfg;
}

}  // namespace peregrine::cli
