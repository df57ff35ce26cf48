#pragma once
// One chat choice's answer when tools are offered: the model's text turned into OpenAI's
// `tool_calls`, as streaming deltas while it is generated or as the message of a whole response.
// Text that may still turn out to be part of a call is held back (parse_tool_output).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/tool_calls.h"

namespace peregrine::server {

// A fresh tool call id: "call_" and 24 random letters and digits.
std::string new_tool_call_id();

class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, std::vector<std::string> names);

  // Adds generated text (`final`: nothing more follows) and returns the deltas to send, in order:
  // {"content": ...}, a call's first {"tool_calls": [{index, id, type, function: {name,
  // arguments: ""}}]}, then {"tool_calls": [{index, function: {arguments: fragment}}]}.
  std::vector<nlohmann::json> add(const std::string& text, bool final);
  // Some call was sent (the finish reason becomes "tool_calls").
  bool has_calls() const { return !ids_.empty(); }

  // A whole answer: {"role": "assistant", "content": text or null, "tool_calls": [...]} (content
  // null and tool_calls present when the text holds calls; no tool_calls otherwise).
  nlohmann::json message(const std::string& text) const;
  // Whether a whole answer holds calls.
  bool text_has_calls(const std::string& text) const;

 private:
  ToolCallFormat format_;
  std::vector<std::string> names_;
  std::string text_;
  std::string content_sent_;
  std::vector<std::string> ids_;        // per call sent
  std::vector<size_t> arguments_sent_;  // bytes of each call's arguments sent
};

}  // namespace peregrine::server
