#include "server/openai_response.h"

#include <random>

#include "tokenizer/utf8.h"

namespace peregrine::server {
namespace {

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::Completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

nlohmann::json envelope(const ResponseMeta& meta, bool chunk) {
  return {{"id", meta.id}, {"object", object_name(meta.endpoint, chunk)}, {"created", meta.created}, {"model", meta.model}};
}

nlohmann::json bytes_of(const std::string& raw) {
  nlohmann::json b = nlohmann::json::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::string new_response_id(Endpoint endpoint) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

std::string token_text(const Tokenizer& tok, TokenId id) { return utf8::sanitize(tok.token_to_bytes(id)); }

nlohmann::json finish_reason_json(RequestFinish finish) {
  switch (finish) {
    case RequestFinish::Stop: return "stop";
    case RequestFinish::Length: return "length";
    case RequestFinish::Cancelled: return "abort";
    case RequestFinish::Error: return "error";
    case RequestFinish::None: break;
  }
  return nullptr;
}

nlohmann::json completion_logprobs(const Tokenizer& tok, std::span<const TokenRecord> tokens, size_t& text_offset) {
  nlohmann::json texts = nlohmann::json::array(), lps = nlohmann::json::array(), tops = nlohmann::json::array(),
                 offsets = nlohmann::json::array();
  for (const TokenRecord& t : tokens) {
    const std::string text = token_text(tok, t.token);
    texts.push_back(text);
    lps.push_back(t.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const TokenLogprob& alt : t.top) {
      const std::string alt_text = token_text(tok, alt.token);
      if (!top.contains(alt_text)) top[alt_text] = alt.logprob;  // two ids with one text: keep the likelier
    }
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += text.size();
  }
  return {{"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

nlohmann::json chat_logprobs(const Tokenizer& tok, std::span<const TokenRecord> tokens) {
  nlohmann::json content = nlohmann::json::array();
  for (const TokenRecord& t : tokens) {
    const std::string raw = tok.token_to_bytes(t.token);
    nlohmann::json top = nlohmann::json::array();
    for (const TokenLogprob& alt : t.top) {
      const std::string alt_raw = tok.token_to_bytes(alt.token);
      top.push_back({{"token", utf8::sanitize(alt_raw)}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt_raw)}});
    }
    content.push_back({{"token", utf8::sanitize(raw)}, {"logprob", t.logprob}, {"bytes", bytes_of(raw)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json completion_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                                   const nlohmann::json& usage) {
  nlohmann::json j = envelope(meta, false);
  nlohmann::json arr = nlohmann::json::array();
  for (const ChoiceOutput& c : choices) {
    arr.push_back({{"index", c.index}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", finish_reason_json(c.finish)}});
  }
  j["choices"] = arr;
  j["usage"] = usage;
  return j;
}

nlohmann::json chat_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                             const nlohmann::json& usage) {
  nlohmann::json j = envelope(meta, false);
  nlohmann::json arr = nlohmann::json::array();
  for (const ChoiceOutput& c : choices) {
    const bool calls = c.message.contains("tool_calls");
    const nlohmann::json message = c.message.is_null() ? nlohmann::json{{"role", "assistant"}, {"content", c.text}} : c.message;
    arr.push_back({{"index", c.index},
                   {"message", message},
                   {"logprobs", c.logprobs},
                   {"finish_reason", calls && c.finish == RequestFinish::Stop ? nlohmann::json("tool_calls")
                                                                              : finish_reason_json(c.finish)}});
  }
  j["choices"] = arr;
  j["usage"] = usage;
  return j;
}

nlohmann::json completion_chunk(const ResponseMeta& meta, int64_t index, const std::string& text,
                                const nlohmann::json& logprobs, RequestFinish finish, bool with_usage_null) {
  nlohmann::json j = envelope(meta, true);
  j["choices"] = nlohmann::json::array(
      {{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason_json(finish)}}});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

nlohmann::json chat_chunk(const ResponseMeta& meta, int64_t index, const nlohmann::json& delta,
                          const nlohmann::json& logprobs, RequestFinish finish, bool with_usage_null) {
  return chat_chunk(meta, index, delta, logprobs, finish_reason_json(finish), with_usage_null);
}

nlohmann::json chat_chunk(const ResponseMeta& meta, int64_t index, const nlohmann::json& delta,
                          const nlohmann::json& logprobs, const nlohmann::json& finish_reason, bool with_usage_null) {
  nlohmann::json j = envelope(meta, true);
  j["choices"] = nlohmann::json::array(
      {{{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

nlohmann::json usage_chunk(const ResponseMeta& meta, const nlohmann::json& usage) {
  nlohmann::json j = envelope(meta, true);
  j["choices"] = nlohmann::json::array();
  j["usage"] = usage;
  return j;
}

}  // namespace peregrine::server
