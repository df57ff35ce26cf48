#include "server/tool_call_stream.h"

#include <random>

namespace peregrine::server {

std::string new_tool_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % 62];
  return id;
}

ToolCallStream::ToolCallStream(ToolCallFormat format, std::vector<std::string> names)
    : format_(format), names_(std::move(names)) {}

std::vector<nlohmann::json> ToolCallStream::add(const std::string& text, bool final) {
  text_ += text;
  const ParsedToolOutput parsed = parse_tool_output(format_, text_, names_, final);
  std::vector<nlohmann::json> deltas;
  // Content grows only at its end while the text grows (parse_tool_output); a final parse that
  // disagrees with what was sent (a malformed call announced earlier) sends no more content.
  if (parsed.content.size() > content_sent_.size() && parsed.content.starts_with(content_sent_)) {
    deltas.push_back({{"content", parsed.content.substr(content_sent_.size())}});
    content_sent_ = parsed.content;
  }
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    const ParsedToolCall& call = parsed.calls[i];
    if (i == ids_.size()) {
      ids_.push_back(new_tool_call_id());
      arguments_sent_.push_back(0);
      nlohmann::json first = {
          {"index", i}, {"id", ids_[i]}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", ""}}}};
      deltas.push_back({{"tool_calls", nlohmann::json::array({first})}});
    }
    if (call.arguments.size() > arguments_sent_[i]) {
      nlohmann::json fragment = {{"index", i},
                                 {"function", {{"arguments", call.arguments.substr(arguments_sent_[i])}}}};
      deltas.push_back({{"tool_calls", nlohmann::json::array({fragment})}});
      arguments_sent_[i] = call.arguments.size();
    }
  }
  return deltas;
}

nlohmann::json ToolCallStream::message(const std::string& text) const {
  const ParsedToolOutput parsed = parse_tool_output(format_, text, names_, true);
  nlohmann::json m = {{"role", "assistant"}};
  if (parsed.calls.empty()) {
    m["content"] = parsed.content;
    return m;
  }
  m["content"] = parsed.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.content);
  nlohmann::json calls = nlohmann::json::array();
  for (const ParsedToolCall& call : parsed.calls) {
    calls.push_back({{"id", new_tool_call_id()},
                     {"type", "function"},
                     {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  m["tool_calls"] = calls;
  return m;
}

bool ToolCallStream::text_has_calls(const std::string& text) const {
  return !parse_tool_output(format_, text, names_, true).calls.empty();
}

}  // namespace peregrine::server
