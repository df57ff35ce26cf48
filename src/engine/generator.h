#pragma once
// Single-request generation: prompt ids → prefill → decode loop → streamed text.
// This is the simplest driver of the model (what `peregrine run` uses); the serving engine
// (continuous batching over many requests) builds on the same Model/KvCache/Sampler pieces.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/batch.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  bool use_kv_cache = true;        // false: recompute the whole prefix at every step
  KvType kv_type = KvType::F16;
  int64_t prefill_chunk = 512;     // prompt tokens per forward call
  bool stop_at_end_of_generation = true;
  SamplingParams sampling;
};

enum class FinishReason { Stop, Length, ContextFull };
std::string_view finish_reason_name(FinishReason r);

struct GenerateResult {
  std::vector<TokenId> prompt_tokens;
  std::vector<TokenId> tokens;           // generated ids (including a final EOS if hit)
  std::vector<SampleResult> samples;     // per generated token: logprob and top alternatives
  std::string text;                      // detokenized generated text
  FinishReason finish = FinishReason::Length;
  double prompt_ms = 0;                  // prefill wall time
  double ttft_ms = 0;                    // from start to the first generated token
  double decode_ms = 0;                  // wall time of the decode steps after the first token
  double decode_tokens_per_s() const;
};

// Runs one request to completion. `on_text` receives text deltas as they become complete UTF-8.
// Throws UsageError for a prompt that does not fit the context.
GenerateResult generate(Model& model, const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                        const GenerateOptions& options,
                        const std::function<void(std::string_view)>& on_text = {});

}  // namespace peregrine
