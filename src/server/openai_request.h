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
#include "server/tool_request.h"

namespace peregrine::server {

// Limits the server documents in docs/api.md.
constexpr int64_t kMaxChoices = 16;          // n
constexpr size_t kMaxStopStrings = 4;        // stop
constexpr size_t kMaxStopLength = 256;       // bytes per stop string
constexpr int64_t kMaxLogprobs = 20;         // completions logprobs, chat top_logprobs
constexpr size_t kMaxPrompts = 64;           // prompts in one completions request
constexpr size_t kMaxLogitBias = 1024;       // entries of logit_bias
constexpr size_t kMaxGrammarBytes = 64 * 1024;  // grammar text, or a schema as JSON text

enum class Endpoint { Completions, ChatCompletions };

// One prompt as the client sent it: text, or token ids.
using PromptSpec = std::variant<std::string, std::vector<int32_t>>;

// Constrained decoding: `response_format` {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"schema": ...}}, or the `grammar` extension (GBNF text). Compiled against the
// model's vocabulary by RequestPreparer::constraint.
struct OutputConstraint {
  enum class Kind { None, JsonObject, JsonSchema, Grammar };
  Kind kind = Kind::None;
  nlohmann::ordered_json schema;  // JsonSchema (restore_schema_order puts its keys in the client's order)
  std::string grammar;            // Grammar
  std::string param;              // the field it came from, for errors: "response_format" or "grammar"
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  std::vector<PromptSpec> prompts;           // completions: >= 1 (one choice group each)
  std::vector<ChatMessage> messages;         // chat: >= 1
  bool add_generation_prompt = true;         // chat
  int64_t n = 1;                             // choices per prompt
  std::optional<int64_t> max_tokens;         // nullopt: the rest of the context
  std::string max_tokens_param = "max_tokens";  // the field it came from (errors name it)
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
  OutputConstraint constraint;
  ToolRequest tools;                         // chat: tools, tool_choice, parallel_tool_calls
};

// Throws ApiError (400) for a body that is not an object or has a bad field.
GenerationRequest parse_completion_request(const nlohmann::json& body);
GenerationRequest parse_chat_request(const nlohmann::json& body);

// Parses a request body as JSON; throws ApiError 400 for malformed JSON, invalid UTF-8 in a
// string, nesting deeper than kMaxJsonDepth (util/json_depth.h), or a top level that is not an
// object.
nlohmann::json parse_body(const std::string& body);

// parse_body, then parse_completion_request or parse_chat_request, then restore_schema_order: a
// generation request's body as /v1/completions and /v1/chat/completions read it.
GenerationRequest read_generation_request(const std::string& body, Endpoint endpoint);

// nlohmann::json keeps object keys sorted; a schema's properties are generated in the order the
// client wrote them, so its schema (and the tools) are read again from the body (which parsed
// already) in order.
void restore_schema_order(GenerationRequest& request, const std::string& body);

}  // namespace peregrine::server
