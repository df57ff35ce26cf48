#pragma once
// Turns the engine events of one API request into what the client receives: SSE chunks while
// streaming, or one whole response object. Keeps per-choice state (text so far, tokens for
// logprobs, finish reason, completion tokens) and the usage totals.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_stream.h"
#include "server/serving_model.h"
#include "server/tool_call_stream.h"

namespace peregrine::server {

class ResponseBuilder {
 public:
  // `prompts` as prepared for the request; choice index = prompt * n + i. With tools active (a
  // chat request), each choice's text is read for calls in `tool_format`.
  ResponseBuilder(const GenerationRequest& request, const std::vector<PreparedPrompt>& prompts, const Tokenizer& tok,
                  std::string model_name, ToolCallFormat tool_format = ToolCallFormat::Fallback);

  // Streaming. start(): chat role deltas, or completions echo text, for every choice.
  std::string stream_start();
  // Chunks for these events; an engine error becomes a `data: {"error": ...}` event.
  std::string stream_events(const std::vector<ChoiceEvent>& events);
  // After the last event: the usage chunk (if stream_options.include_usage) and `data: [DONE]`.
  std::string stream_end();

  // Non-streaming: collect events, then build the response.
  void accumulate(const std::vector<ChoiceEvent>& events);
  // The whole response object; throws ApiError if any choice ended with an error: 400 naming the
  // constraint's field when the request's own grammar caused it, else 500.
  nlohmann::json response() const;

  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;
  const ResponseMeta& meta() const { return meta_; }

 private:
  struct Choice {
    std::string text;                 // generated text (without echo)
    std::vector<TokenRecord> tokens;  // for logprobs (tokens that ended the request excluded)
    RequestFinish finish = RequestFinish::None;
    std::string error;
    bool client_error = false;  // RequestEvent::client_error
    int64_t completion_tokens = 0;
    size_t text_offset = 0;           // completions logprobs while streaming
    std::optional<ToolCallStream> tools;  // chat with tools: calls read out of the text
  };
  // A chat choice's deltas for this event's text (content, or tool calls when tools are active).
  std::vector<nlohmann::json> chat_deltas(Choice& c, const RequestEvent& ev);
  // Records the event in the choice; returns the token record to report, if any.
  // Adds the event to the choice; returns the tokens whose logprobs it reports.
  std::vector<TokenRecord> record(Choice& c, const RequestEvent& ev);
  nlohmann::json logprobs_for(Choice& c, const std::vector<TokenRecord>& tokens);
  ApiError generation_error(const std::string& error, bool client_error) const;

  GenerationRequest request_;
  const Tokenizer& tok_;
  ResponseMeta meta_;
  std::vector<std::string> echo_;  // per choice: prompt text when echo, else empty
  std::vector<Choice> choices_;
  int64_t prompt_tokens_ = 0;
};

}  // namespace peregrine::server
