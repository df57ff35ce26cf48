#pragma once
// The tool-calling fields of POST /v1/chat/completions: `tools` (OpenAI function tools),
// `tool_choice` ("none", "auto", "required" or {"type": "function", "function": {"name"}}) and
// `parallel_tool_calls`, and the tool fields of messages (assistant `tool_calls`, role "tool" with
// `tool_call_id`). Malformed input throws ApiError 400 naming the field.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"

namespace peregrine::server {

constexpr size_t kMaxTools = 128;                  // tools in one request (OpenAI's limit)
constexpr size_t kMaxToolCallsPerMessage = 128;    // tool_calls in one assistant message
constexpr size_t kMaxToolSchemaBytes = 64 * 1024;  // one tool's parameters as JSON text

struct ToolRequest {
  enum class Choice { None, Auto, Required, Named };
  nlohmann::ordered_json tools;     // the list as sent (null: no tools)
  std::vector<ToolSchema> schemas;  // each tool's name and parameters, in order
  Choice choice = Choice::Auto;
  std::string named;     // Choice::Named: the function's name
  bool parallel = true;  // parallel_tool_calls

  // Tools are offered to the model (rendered) and its calls parsed: tools given, choice not "none".
  bool active() const { return !tools.is_null() && choice != Choice::None; }
  // The answer must be calls: "required" or a named function.
  bool forced() const { return active() && (choice == Choice::Required || choice == Choice::Named); }
  std::vector<std::string> names() const;
  // The tools a forced answer may call (the named one, or all).
  std::vector<ToolSchema> callable() const;
};

// tools, tool_choice, parallel_tool_calls. Each tool's parameters must compile to a grammar (the
// JSON Schema subset of docs/api.md).
ToolRequest parse_tool_request(const nlohmann::json& body);

// The tools list again from the body with its keys in the client's order (nlohmann::json sorts
// them; the model sees the definitions, and a forced call writes the properties, in the order
// written).
void restore_tools_order(ToolRequest& tools, const std::string& body);

// An assistant message's `tool_calls` and a tool message's `tool_call_id` into `out`;
// `param` is "messages[i]".
void read_message_tool_fields(const nlohmann::json& message, const std::string& param, ChatMessage& out);

}  // namespace peregrine::server
