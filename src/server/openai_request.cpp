#include "server/openai_request.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "util/json_depth.h"

namespace peregrine::server {
namespace {

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

std::vector<int32_t> token_list(const nlohmann::json& arr, const std::string& param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& v : arr) ids.push_back(static_cast<int32_t>(as_int(v, param, 0, kMaxTokenId)));
  return ids;
}

// prompt: "text" | ["text", ...] | [1, 2, 3] | [[1, 2], [3]]
std::vector<PromptSpec> parse_prompts(const nlohmann::json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw invalid_request("'prompt' is required", "prompt");
  const nlohmann::json& p = *it;
  std::vector<PromptSpec> out;
  if (p.is_string()) {
    out.emplace_back(p.get<std::string>());
    return out;
  }
  if (!p.is_array() || p.empty()) {
    throw invalid_request("'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists",
                          "prompt");
  }
  if (p.front().is_number()) {
    out.emplace_back(token_list(p, "prompt"));
    return out;
  }
  if (p.size() > kMaxPrompts) {
    throw invalid_request("at most " + std::to_string(kMaxPrompts) + " prompts per request", "prompt");
  }
  const bool strings = p.front().is_string();
  for (const auto& item : p) {
    if (strings && item.is_string()) {
      out.emplace_back(item.get<std::string>());
    } else if (!strings && item.is_array() && !item.empty()) {
      out.emplace_back(token_list(item, "prompt"));
    } else {
      throw invalid_request("'prompt' must be a string, a list of strings, a list of token ids or a list of non-empty "
                            "token-id lists (not mixed)",
                            "prompt");
    }
  }
  return out;
}

std::vector<std::string> parse_stop(const nlohmann::json& body) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > kMaxStopStrings) {
      throw invalid_request("'stop' holds at most " + std::to_string(kMaxStopStrings) + " strings", "stop");
    }
    for (const auto& s : *it) {
      if (!s.is_string()) throw invalid_request("'stop' must be a string or a list of strings", "stop");
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw invalid_request("'stop' must be a string or a list of strings", "stop");
  }
  for (const auto& s : stop) {
    if (s.empty()) throw invalid_request("'stop' strings must not be empty", "stop");
    if (s.size() > kMaxStopLength) {
      throw invalid_request("'stop' strings are at most " + std::to_string(kMaxStopLength) + " bytes", "stop");
    }
  }
  return stop;
}

// logit_bias: {"token id as a string": bias in [-100, 100]}
std::vector<std::pair<int32_t, float>> parse_logit_bias(const nlohmann::json& body) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_object()) throw invalid_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
  if (it->size() > kMaxLogitBias) {
    throw invalid_request("'logit_bias' has more than " + std::to_string(kMaxLogitBias) + " entries", "logit_bias");
  }
  std::vector<std::pair<int32_t, float>> bias;
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    const std::string& key = kv.key();
    int64_t id = -1;
    if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos) {
      id = std::stoll(key);
    }
    if (id < 0 || id > kMaxTokenId) {
      throw invalid_request(
          "'logit_bias' keys must be token ids (non-negative integers), got '" + clip_client_text(key) + "'",
          "logit_bias");
    }
    if (!kv.value().is_number() || !std::isfinite(kv.value().get<double>()) || std::fabs(kv.value().get<double>()) > 100) {
      throw invalid_request("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
    }
    bias.emplace_back(static_cast<int32_t>(id), kv.value().get<float>());
  }
  return bias;
}

// response_format and grammar (constrained decoding).
OutputConstraint parse_constraint(const nlohmann::json& body) {
  OutputConstraint c;
  if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
    if (!rf->is_object()) throw invalid_request("'response_format' must be an object", "response_format");
    const std::string type = read_string(*rf, "type").value_or("");
    c.param = "response_format";
    if (type == "json_object") {
      c.kind = OutputConstraint::Kind::JsonObject;
    } else if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object()) {
        throw invalid_request("'response_format.json_schema' must be an object with a 'schema'", "response_format");
      }
      auto schema = js->find("schema");
      if (schema == js->end() || !(schema->is_object() || schema->is_boolean())) {
        throw invalid_request("'response_format.json_schema.schema' must be a JSON schema (an object)",
                              "response_format");
      }
      if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
        throw invalid_request("'response_format.json_schema.strict' must be a boolean", "response_format");
      }
      const std::string text = schema->dump();
      if (text.size() > kMaxGrammarBytes) {
        throw invalid_request("the schema is over " + std::to_string(kMaxGrammarBytes) + " bytes", "response_format");
      }
      c.kind = OutputConstraint::Kind::JsonSchema;
      c.schema = nlohmann::ordered_json::parse(text);
    } else if (type != "text") {
      throw invalid_request("'response_format.type' must be 'text', 'json_object' or 'json_schema'", "response_format");
    }
  }
  if (auto grammar = read_string(body, "grammar")) {
    if (c.kind != OutputConstraint::Kind::None) {
      throw invalid_request("'grammar' and a 'response_format' other than text cannot be combined", "grammar");
    }
    if (grammar->size() > kMaxGrammarBytes) {
      throw invalid_request("'grammar' is over " + std::to_string(kMaxGrammarBytes) + " bytes", "grammar");
    }
    c.kind = OutputConstraint::Kind::Grammar;
    c.grammar = std::move(*grammar);
    c.param = "grammar";
  }
  return c;
}

// Fields both endpoints share.
void parse_common(const nlohmann::json& body, GenerationRequest& r) {
  if (!body.is_object()) throw invalid_request("the request body must be a JSON object");
  auto model = read_string(body, "model");
  if (!model) throw invalid_request("'model' is required", "model");
  r.model = *model;
  r.n = read_int(body, "n", 1, kMaxChoices).value_or(1);
  r.stream = read_bool(body, "stream").value_or(false);
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw invalid_request("'stream_options' must be an object", "stream_options");
    if (!r.stream) throw invalid_request("'stream_options' is only allowed with stream: true", "stream_options");
    r.include_usage = read_bool(*it, "include_usage").value_or(false);
  }
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(read_number(body, "temperature", 0, 2).value_or(1.0));
  s.top_p = static_cast<float>(read_number(body, "top_p", 0, 1).value_or(1.0));
  if (s.top_p <= 0) throw invalid_request("'top_p' must be in (0, 1]", "top_p");
  s.presence_penalty = static_cast<float>(read_number(body, "presence_penalty", -2, 2).value_or(0));
  s.frequency_penalty = static_cast<float>(read_number(body, "frequency_penalty", -2, 2).value_or(0));
  s.repetition_penalty = static_cast<float>(read_number(body, "repetition_penalty", 0, 10).value_or(1.0));
  if (s.repetition_penalty <= 0) throw invalid_request("'repetition_penalty' must be in (0, 10]", "repetition_penalty");
  s.min_p = static_cast<float>(read_number(body, "min_p", 0, 1).value_or(0));
  const int64_t top_k = read_int(body, "top_k", -1, 1 << 20).value_or(0);
  s.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);  // vLLM's -1 means off, as 0 does here
  s.penalty_last_n = -1;  // OpenAI's penalties count the whole generated text
  s.logit_bias = parse_logit_bias(body);
  if (auto seed = read_int(body, "seed", INT64_MIN, INT64_MAX)) r.seed = static_cast<uint64_t>(*seed);
  r.stop = parse_stop(body);
  r.ignore_eos = read_bool(body, "ignore_eos").value_or(false);
  r.speculative = read_bool(body, "speculative").value_or(true);
  r.user = read_string(body, "user").value_or("");
  r.constraint = parse_constraint(body);
  // max_completion_tokens is the newer name; both accepted, the newer wins.
  r.max_tokens = read_int(body, "max_tokens", 1, INT32_MAX);
  if (auto m = read_int(body, "max_completion_tokens", 1, INT32_MAX)) {
    r.max_tokens = m;
    r.max_tokens_param = "max_completion_tokens";
  }
}

std::string message_content(const nlohmann::json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw invalid_request("'" + param + "' must be a string or a list of text parts", param);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object()) throw invalid_request("'" + param + "' parts must be objects", param);
    auto type = read_string(part, "type");
    if (type != "text") {
      throw invalid_request("'" + param + "': only parts of type 'text' are supported", param);
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) throw invalid_request("'" + param + "' text part needs a 'text' string", param);
    text += t->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const nlohmann::json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw invalid_request("'messages' is required", "messages");
  if (!it->is_array() || it->empty()) throw invalid_request("'messages' must be a non-empty list", "messages");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& m = (*it)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw invalid_request("'" + param + "' must be an object", param);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw invalid_request("'" + param + ".role' must be a string", param + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "developer" && r != "tool") {
      throw invalid_request(
          "'" + param + ".role' must be system, user, assistant, developer or tool, got '" + clip_client_text(r) + "'",
          param + ".role");
    }
    auto content = m.find("content");
    // An assistant message that calls tools may have no content.
    const bool calls = r == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (content == m.end() && !calls) {
      throw invalid_request("'" + param + ".content' is required", param + ".content");
    }
    // "developer" is OpenAI's newer name for "system"; templates only know the latter.
    ChatMessage message{r == "developer" ? "system" : r,
                        content == m.end() ? std::string() : message_content(*content, i), {}, {}};
    read_message_tool_fields(m, param, message);
    messages.push_back(std::move(message));
  }
  return messages;
}

}  // namespace

nlohmann::json parse_body(const std::string& body) {
  // Measured before parsing: a deeper value is never built, so nothing recurses through it later.
  if (json_nesting_depth(body) > kMaxJsonDepth) {
    throw invalid_request("the request body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                          " levels deep");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann reports malformed JSON and invalid UTF-8 in strings alike, with the byte position.
    throw invalid_request(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw invalid_request("the request body must be a JSON object");
  return j;
}

void restore_schema_order(GenerationRequest& request, const std::string& body) {
  restore_tools_order(request.tools, body);
  if (request.constraint.kind != OutputConstraint::Kind::JsonSchema) return;
  request.constraint.schema = nlohmann::ordered_json::parse(body)["response_format"]["json_schema"]["schema"];
}

GenerationRequest parse_completion_request(const nlohmann::json& body) {
  GenerationRequest r;
  r.endpoint = Endpoint::Completions;
  parse_common(body, r);
  r.prompts = parse_prompts(body);
  r.echo = read_bool(body, "echo").value_or(false);
  if (auto k = read_int(body, "logprobs", 0, kMaxLogprobs)) {
    r.logprobs = true;
    r.top_logprobs = static_cast<int32_t>(*k);
  }
  if (r.echo && r.logprobs) {
    throw invalid_request("'echo' together with 'logprobs' is not supported (prompt logprobs are not computed)", "echo");
  }
  if (auto suffix = read_string(body, "suffix"); suffix && !suffix->empty()) {
    throw invalid_request("'suffix' is not supported", "suffix");
  }
  if (auto best_of = read_int(body, "best_of", 1, kMaxChoices); best_of && *best_of != r.n) {
    throw invalid_request("'best_of' other than n is not supported", "best_of");
  }
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    throw invalid_request("'tools' are only supported on /v1/chat/completions", "tools");
  }
  r.sampling.n_logprobs = r.top_logprobs;
  return r;
}

GenerationRequest parse_chat_request(const nlohmann::json& body) {
  GenerationRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  parse_common(body, r);
  r.messages = parse_messages(body);
  r.add_generation_prompt = read_bool(body, "add_generation_prompt").value_or(true);
  r.logprobs = read_bool(body, "logprobs").value_or(false);
  if (auto k = read_int(body, "top_logprobs", 0, kMaxLogprobs)) {
    if (!r.logprobs) throw invalid_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    r.top_logprobs = static_cast<int32_t>(*k);
  }
  if (auto it = body.find("functions"); it != body.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    throw invalid_request("'functions' is not supported (use 'tools')", "functions");
  }
  r.tools = parse_tool_request(body);
  if (r.tools.active() && r.constraint.kind != OutputConstraint::Kind::None) {
    throw invalid_request("'" + r.constraint.param + "' cannot be combined with 'tools' (unless 'tool_choice' is 'none')",
                          r.constraint.param);
  }
  r.sampling.n_logprobs = r.top_logprobs;
  return r;
}

GenerationRequest read_generation_request(const std::string& body, Endpoint endpoint) {
  const nlohmann::json json = parse_body(body);
  GenerationRequest request =
      endpoint == Endpoint::Completions ? parse_completion_request(json) : parse_chat_request(json);
  restore_schema_order(request, body);
  return request;
}

}  // namespace peregrine::server
