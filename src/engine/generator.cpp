#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"

namespace peregrine {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

constexpr SeqId kSeq = 0;

// Feeds tokens[from, to) at their positions, asking logits for the last one only.
void feed(Model& model, KvCache& kv, std::span<const TokenId> tokens, int64_t from, int64_t to,
          Batch& batch, std::vector<float>& logits) {
  batch.clear();
  for (int64_t i = from; i < to; ++i) batch.add(tokens[i], static_cast<int32_t>(i), kSeq, i == to - 1);
  model.forward(batch, kv, logits);
}

}  // namespace

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::ContextFull: return "context_full";
  }
  return "?";
}

double GenerateResult::decode_tokens_per_s() const {
  // The first token comes from prefill; the decode rate counts the tokens after it.
  if (tokens.size() < 2 || decode_ms <= 0) return 0;
  return static_cast<double>(tokens.size() - 1) / (decode_ms / 1000.0);
}

GenerateResult generate(Model& model, const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                        const GenerateOptions& options,
                        const std::function<void(std::string_view)>& on_text) {
  const ModelConfig& cfg = model.config();
  if (prompt.empty()) throw UsageError("the prompt has no tokens (a model needs at least BOS)");
  if (static_cast<int64_t>(prompt.size()) >= cfg.context_length)
    throw UsageError("the prompt has " + std::to_string(prompt.size()) +
                     " tokens, which does not leave room to generate within the context length " +
                     std::to_string(cfg.context_length));
  if (options.prefill_chunk < 1) throw UsageError("prefill chunk must be at least 1 token");

  GenerateResult result;
  result.prompt_tokens.assign(prompt.begin(), prompt.end());
  const int64_t limit = std::min<int64_t>(cfg.context_length,
                                          static_cast<int64_t>(prompt.size()) + options.max_new_tokens);
  // One sequence needs room for its whole context: plan the blocks for it.
  const int32_t block_size = 16;
  KvCache kv(cfg.kv_shape(), options.kv_type, (limit + block_size - 1) / block_size, block_size);
  if (!kv.reserve(kSeq, limit)) throw UsageError("KV cache could not hold the request");

  Sampler sampler(options.sampling);
  // A prompt of control tokens only (BOS) means the output starts the text, so SentencePiece's
  // leading space on the first piece is dropped, as when decoding a whole text.
  const bool output_starts_text = std::all_of(prompt.begin(), prompt.end(),
                                              [&](TokenId t) { return tokenizer.is_control(t); });
  StreamDecoder detok(tokenizer, /*render_special=*/false, output_starts_text);
  std::vector<TokenId> sequence(prompt.begin(), prompt.end());
  Batch batch;
  std::vector<float> logits;

  const auto t0 = Clock::now();
  // Prefill in chunks: the same code path the serving engine uses for chunked prefill.
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  for (int64_t from = 0; from < n_prompt; from += options.prefill_chunk)
    feed(model, kv, sequence, from, std::min(n_prompt, from + options.prefill_chunk), batch, logits);
  result.prompt_ms = ms_since(t0);

  Clock::time_point decode_start;
  while (true) {
    SampleResult s = sampler.sample(std::span<const float>(logits).first(cfg.n_vocab), sequence);
    if (result.tokens.empty()) {
      result.ttft_ms = ms_since(t0);
      decode_start = Clock::now();
    }
    result.tokens.push_back(s.token);
    result.samples.push_back(s);
    sequence.push_back(s.token);
    const bool eog = tokenizer.is_end_of_generation(s.token);
    if (!(eog && options.stop_at_end_of_generation)) {
      std::string piece = detok.push(s.token);
      if (!piece.empty()) {
        result.text += piece;
        if (on_text) on_text(piece);
      }
    }
    if (eog && options.stop_at_end_of_generation) {
      result.finish = FinishReason::Stop;
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= options.max_new_tokens) {
      result.finish = FinishReason::Length;
      break;
    }
    const int64_t n = static_cast<int64_t>(sequence.size());
    if (n >= cfg.context_length) {
      result.finish = FinishReason::ContextFull;
      break;
    }
    if (options.use_kv_cache) {
      feed(model, kv, sequence, n - 1, n, batch, logits);
    } else {
      // No cache: forget the sequence and recompute every position, to show what the cache saves.
      kv.release(kSeq);
      if (!kv.reserve(kSeq, limit)) throw UsageError("KV cache could not hold the request");
      for (int64_t from = 0; from < n; from += options.prefill_chunk)
        feed(model, kv, sequence, from, std::min(n, from + options.prefill_chunk), batch, logits);
    }
  }
  std::string tail = detok.flush();
  if (!tail.empty()) {
    result.text += tail;
    if (on_text) on_text(tail);
  }
  result.decode_ms = ms_since(decode_start);
  return result;
}

}  // namespace peregrine
