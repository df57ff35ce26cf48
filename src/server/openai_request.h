#pragma once
// Parsing and validating the body of POST /v1/completions and /v1/chat/completions into a
// model-independent GenerationRequest. Field names, types and ranges follow OpenAI's API (with
// vLLM's extensions top_k, min_p, repetition_penalty); unknown fields are ignored; anything
// malformed throws ApiError 400 with the offending field as `param`.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "sampling/sampler.h"

namespace peregrine::server {

// Limits the server documents in docs/api.md.
constexpr int64_t kMaxChoices = 16;          // n
constexpr size_t kMaxStopStrings = 4;        // stop
constexpr size_t kMaxStopLength = 256;       // bytes per stop string
constexpr int64_t kMaxLogprobs = 20;         // completions logprobs, chat top_logprobs
constexpr size_t kMaxPrompts = 64;           // prompts in one completions request
constexpr size_t kMaxLogitBias = 1024;       // entries of logit_bias

enum class Endpoint { Completions, ChatCompletions };

// One prompt as the client sent it: text, or token ids.
using PromptSpec = std::variant<std::string, std::vector<int32_t>>;

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  std::vector<PromptSpec> prompts;           // completions: >= 1 (one choice group each)
  std::vector<ChatMessage> messages;         // chat: >= 1
  bool add_generation_prompt = true;         // chat
  int64_t n = 1;                             // choices per prompt
  std::optional<int64_t> max_tokens;         // nullopt: the rest of the context
  SamplingParams sampling;                   // seed and n_logprobs set here; per-choice seed = seed + i
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;                   // extension (vLLM)
  bool speculative = true;                   // extension: false turns speculative decoding off for this request
  bool stream = false;
  bool include_usage = false;                // stream_options.include_usage
  bool echo = false;                         // completions
  // Logprobs: completions `logprobs: k` -> want with k alternatives; chat `logprobs: true` +
  // `top_logprobs: k`.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::string user;
};

// Throws ApiError (400) for a body that is not an object or has a bad field.
GenerationRequest parse_completion_request(const nlohmann::json& body);
GenerationRequest parse_chat_request(const nlohmann::json& body);

// Parses a request body as JSON; throws ApiError 400 for malformed JSON, invalid UTF-8 in a
// string, or a top level that is not an object.
nlohmann::json parse_body(const std::string& body);

}  // namespace peregrine::server
