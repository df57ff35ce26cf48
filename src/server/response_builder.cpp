#include "server/response_builder.h"

#include <ctime>

#include "server/api_error.h"
#include "server/sse.h"

namespace peregrine::server {

ResponseBuilder::ResponseBuilder(const GenerationRequest& request, const std::vector<PreparedPrompt>& prompts,
                                 const Tokenizer& tok, std::string model_name, ToolCallFormat tool_format)
    : request_(request), tok_(tok) {
  meta_.endpoint = request.endpoint;
  meta_.id = new_response_id(request.endpoint);
  meta_.created = static_cast<int64_t>(std::time(nullptr));
  meta_.model = std::move(model_name);
  for (const PreparedPrompt& p : prompts) {
    prompt_tokens_ += static_cast<int64_t>(p.tokens.size());
    for (int64_t i = 0; i < request.n; ++i) {
      echo_.push_back(request.echo ? p.text : std::string());
      choices_.emplace_back();
      choices_.back().text_offset = echo_.back().size();
      if (request.endpoint == Endpoint::ChatCompletions && request.tools.active()) {
        choices_.back().tools.emplace(tool_format, request.tools.names());
      }
    }
  }
}

int64_t ResponseBuilder::completion_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.completion_tokens;
  return n;
}

std::vector<TokenRecord> ResponseBuilder::record(Choice& c, const RequestEvent& ev) {
  c.text += ev.text;
  if (ev.finish != RequestFinish::None) {
    c.finish = ev.finish;
    c.error = ev.error;
    c.client_error = ev.client_error;
  }
  std::vector<TokenRecord> reported;
  for (size_t i = 0; i < ev.tokens.size(); ++i) {
    const GeneratedToken& t = ev.tokens[i];
    ++c.completion_tokens;
    // The end-of-generation token that stopped the request is not part of the answer.
    const bool ending_token = i + 1 == ev.tokens.size() && ev.finish == RequestFinish::Stop && !request_.ignore_eos &&
                              tok_.is_end_of_generation(t.token);
    if (ending_token || !request_.logprobs) continue;
    reported.push_back({t.token, t.logprob, t.top_logprobs});
    c.tokens.push_back(reported.back());
  }
  return reported;
}

nlohmann::json ResponseBuilder::logprobs_for(Choice& c, const std::vector<TokenRecord>& tokens) {
  if (!request_.logprobs) return nullptr;
  if (request_.endpoint == Endpoint::Completions) return completion_logprobs(tok_, tokens, c.text_offset);
  return chat_logprobs(tok_, tokens);
}

std::vector<nlohmann::json> ResponseBuilder::chat_deltas(Choice& c, const RequestEvent& ev) {
  if (!c.tools) {
    if (ev.text.empty()) return {};
    return {{{"content", ev.text}}};
  }
  return c.tools->add(ev.text, ev.finish != RequestFinish::None);
}

// A grammar that grows too ambiguous mid-generation is the client's input, answered as such.
ApiError ResponseBuilder::generation_error(const std::string& error, bool client_error) const {
  if (client_error) {
    const std::string& param = request_.constraint.param;
    return invalid_request("generation failed: " + error, param.empty() ? std::nullopt : std::optional(param));
  }
  return server_error("generation failed: " + error);
}

std::string ResponseBuilder::stream_start() {
  std::string out;
  const bool usage_null = request_.include_usage;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (request_.endpoint == Endpoint::ChatCompletions) {
      out += sse_event(chat_chunk(meta_, static_cast<int64_t>(i), {{"role", "assistant"}, {"content", ""}}, nullptr,
                                  RequestFinish::None, usage_null));
    } else if (!echo_[i].empty()) {
      out += sse_event(completion_chunk(meta_, static_cast<int64_t>(i), echo_[i], nullptr, RequestFinish::None, usage_null));
    }
  }
  return out;
}

std::string ResponseBuilder::stream_events(const std::vector<ChoiceEvent>& events) {
  std::string out;
  const bool usage_null = request_.include_usage;
  for (const ChoiceEvent& ce : events) {
    Choice& c = choices_[ce.choice];
    const auto index = static_cast<int64_t>(ce.choice);
    const RequestEvent& ev = ce.event;
    const std::vector<TokenRecord> reported = record(c, ev);
    nlohmann::json lp = reported.empty() ? nlohmann::json(nullptr) : logprobs_for(c, reported);
    if (request_.endpoint == Endpoint::Completions) {
      if (!ev.text.empty() || !reported.empty()) {
        out += sse_event(completion_chunk(meta_, index, ev.text, lp, RequestFinish::None, usage_null));
      }
    } else {
      std::vector<nlohmann::json> deltas = chat_deltas(c, ev);
      // Logprobs ride on the first delta (on an empty one when the text is held back).
      if (deltas.empty() && !reported.empty()) deltas.push_back(nlohmann::json::object());
      for (const nlohmann::json& delta : deltas) {
        out += sse_event(chat_chunk(meta_, index, delta, lp, RequestFinish::None, usage_null));
        lp = nullptr;
      }
    }
    if (ev.finish == RequestFinish::Error) {
      // The stream still ends properly: the choice's last chunk with finish_reason "error", an
      // error event saying why, then (after the others) [DONE].
      if (request_.endpoint == Endpoint::Completions) {
        out += sse_event(completion_chunk(meta_, index, "", nullptr, ev.finish, usage_null));
      } else {
        out += sse_event(chat_chunk(meta_, index, nlohmann::json::object(), nullptr, finish_reason_json(ev.finish),
                                    usage_null));
      }
      out += sse_event(generation_error(ev.error, ev.client_error).body());
    } else if (ev.finish != RequestFinish::None) {
      if (request_.endpoint == Endpoint::Completions) {
        out += sse_event(completion_chunk(meta_, index, "", nullptr, ev.finish, usage_null));
      } else {
        const bool calls = c.tools && c.tools->has_calls() && ev.finish == RequestFinish::Stop;
        out += sse_event(chat_chunk(meta_, index, nlohmann::json::object(), nullptr,
                                    calls ? nlohmann::json("tool_calls") : finish_reason_json(ev.finish), usage_null));
      }
    }
  }
  return out;
}

std::string ResponseBuilder::stream_end() {
  std::string out;
  if (request_.include_usage) out += sse_event(usage_chunk(meta_, usage_json(prompt_tokens_, completion_tokens())));
  out += sse_done();
  return out;
}

void ResponseBuilder::accumulate(const std::vector<ChoiceEvent>& events) {
  for (const ChoiceEvent& ce : events) {
    record(choices_[ce.choice], ce.event);
  }
}

nlohmann::json ResponseBuilder::response() const {
  std::vector<ChoiceOutput> out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    if (c.finish == RequestFinish::Error) throw generation_error(c.error, c.client_error);
    ChoiceOutput o;
    o.index = static_cast<int64_t>(i);
    o.text = echo_[i] + c.text;
    o.finish = c.finish;
    if (c.tools) o.message = c.tools->message(c.text);
    if (request_.logprobs) {
      size_t offset = echo_[i].size();
      o.logprobs = request_.endpoint == Endpoint::Completions ? completion_logprobs(tok_, c.tokens, offset)
                                                              : chat_logprobs(tok_, c.tokens);
    }
    out.push_back(std::move(o));
  }
  const nlohmann::json usage = usage_json(prompt_tokens_, completion_tokens());
  return request_.endpoint == Endpoint::Completions ? completion_response(meta_, out, usage)
                                                    : chat_response(meta_, out, usage);
}

}  // namespace peregrine::server
