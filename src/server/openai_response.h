#pragma once
// Building OpenAI's response objects: whole responses, streaming chunks, usage and logprobs, for
// text completions ("text_completion") and chat ("chat.completion" / "chat.completion.chunk").
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A fresh response id for the endpoint: prefix plus 24 random hex digits.
std::string new_response_id(Endpoint endpoint);

// One generated token with what the sampler reported about it.
struct TokenRecord {
  TokenId token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

// The text a token contributes, with bytes that are not valid UTF-8 on their own replaced by
// U+FFFD (a multi-byte character split across byte tokens shows as replacements in logprobs,
// as in OpenAI's API, while the choice text itself is decoded whole).
std::string token_text(const Tokenizer& tok, TokenId id);

// finish_reason for the client: "stop" | "length" | "abort" (cancelled) | "error"; null if None.
nlohmann::json finish_reason_json(RequestFinish finish);

// Completions logprobs {tokens, token_logprobs, top_logprobs, text_offset}; `text_offset` is the
// offset of the first token in the choice text and advances past the tokens.
nlohmann::json completion_logprobs(const Tokenizer& tok, std::span<const TokenRecord> tokens, size_t& text_offset);
// Chat logprobs {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json chat_logprobs(const Tokenizer& tok, std::span<const TokenRecord> tokens);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

struct ChoiceOutput {
  int64_t index = 0;
  std::string text;
  nlohmann::json logprobs;  // null when not requested
  RequestFinish finish = RequestFinish::None;
  // Chat with tools: the whole message ({"role", "content", "tool_calls"}) replaces {role, text};
  // when it has tool_calls, a "stop" finish is reported as "tool_calls".
  nlohmann::json message;
};

// Whole (non-streaming) responses.
nlohmann::json completion_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                                   const nlohmann::json& usage);
nlohmann::json chat_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                             const nlohmann::json& usage);

// Streaming chunks. `with_usage_null` adds "usage": null as OpenAI does when include_usage is on.
nlohmann::json completion_chunk(const ResponseMeta& meta, int64_t index, const std::string& text,
                                const nlohmann::json& logprobs, RequestFinish finish, bool with_usage_null);
// delta: {"role": "assistant", "content": ""} first, then {"content": ...}, then {} with the finish.
nlohmann::json chat_chunk(const ResponseMeta& meta, int64_t index, const nlohmann::json& delta,
                          const nlohmann::json& logprobs, RequestFinish finish, bool with_usage_null);
// The same with the finish reason as sent ("tool_calls" has no RequestFinish).
nlohmann::json chat_chunk(const ResponseMeta& meta, int64_t index, const nlohmann::json& delta,
                          const nlohmann::json& logprobs, const nlohmann::json& finish_reason, bool with_usage_null);
// The final usage chunk: "choices": [] and "usage".
nlohmann::json usage_chunk(const ResponseMeta& meta, const nlohmann::json& usage);

}  // namespace peregrine::server
