#pragma once
// Tool calls in a chat: how a model is told about its tools, how its calls and their results are
// written into the conversation, and how the calls are read back out of its text.
//
// The format is chosen by the chat template (tool_call_format):
//   Hermes      templates that render `tools` and speak of <tool_call> (Qwen 2.5, Qwen 3, Hermes 2
//               Pro): the template renders tools, calls and results itself; a call is
//               <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>, several in a row.
//   Llama3Json  templates that render `tools` and ask for {"name": ..., "parameters": ...} (Llama
//               3.1, 3.2): the template renders everything; a call is that object (after an
//               optional <|python_tag|>); one call per answer (the template refuses several).
//   Fallback    any other template: the tools go into a system message (fallback_tools_block), a
//               call is written as in Hermes, earlier calls are folded into the assistant's
//               content in that form and tool results become user messages
//               <tool_response>\n...\n</tool_response> (fallback_tool_messages).
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"

namespace peregrine {

enum class ToolCallFormat { Hermes, Llama3Json, Fallback };

ToolCallFormat tool_call_format(const ChatTemplate& chat_template);
const char* tool_call_format_name(ToolCallFormat format);

// The system-message text that lists the tools (OpenAI's tool objects, one JSON per line) and says
// how to call them, for templates that do not render `tools`.
std::string fallback_tools_block(const nlohmann::ordered_json& tools);

// The conversation as a template without tool support gets it: the tools block merged into the
// first system message (or a new one in front; nothing when `tools` is null), assistant calls
// appended to their content as <tool_call> blocks, and each run of tool results one user message
// of <tool_response> blocks.
std::vector<ChatMessage> fallback_tool_messages(std::span<const ChatMessage> messages,
                                                const nlohmann::ordered_json& tools);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // the JSON text the model wrote (a prefix of it while incomplete)
  bool complete = false;  // the call's text has ended (and, when final, its arguments are an object)
};

struct ParsedToolOutput {
  std::string content;                // the text outside the calls
  std::vector<ParsedToolCall> calls;  // in order; only calls of known tools
};

// Reads the calls out of a model's text. `names` are the tools offered: a call of another name is
// text. With `final` false the text may still grow: `content` is then only what cannot turn out
// to be part of a call (a trailing partial "<tool_call>", trailing spaces, a Llama 3 answer that
// still looks like a JSON call are held back) and the last call may be incomplete; every later
// parse of a longer text extends both (content and each call's arguments grow only at their
// ends), so a stream can send differences. With `final` true a call whose text is not a
// {"name", "arguments"} object with an object as arguments is text again.
ParsedToolOutput parse_tool_output(ToolCallFormat format, std::string_view text, std::span<const std::string> names,
                                   bool final);

// One tool for a grammar: its name and the JSON Schema of its arguments.
struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters;  // {"type": "object"} when the tool has none
};

// GBNF for answers that are exactly calls of these tools in `format` (one, or one or more when
// `parallel`; Llama3Json always one), each call's arguments valid against its schema
// (json_schema_to_gbnf). Throws GrammarError for a schema the compiler does not support.
std::string tool_call_gbnf(ToolCallFormat format, std::span<const ToolSchema> tools, bool parallel);

}  // namespace peregrine
