// Tool-call formats: detection from the template, the fallback rendering, and the grammar of
// forced calls. Reading calls back out of text is tool_call_parser.cpp.
#include "chat/tool_calls.h"

#include <cctype>

#include "grammar/json_schema.h"
#include "util/json_depth.h"

namespace peregrine {
namespace {

constexpr std::string_view kFallbackInstructions =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kFallbackCallFormat =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

std::string hermes_call_text(const ChatToolCall& call) {
  // The arguments as written when they are JSON, else as a JSON string (so is JSON nested
  // deeper than kMaxJsonDepth: dump() recurses once per level).
  nlohmann::ordered_json args = nlohmann::ordered_json::value_t::discarded;
  if (json_nesting_depth(call.arguments) <= kMaxJsonDepth)
    args = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
  if (args.is_discarded()) args = call.arguments;
  nlohmann::ordered_json name = call.name;
  return "<tool_call>\n{\"name\": " + name.dump() + ", \"arguments\": " + args.dump() + "}\n</tool_call>";
}

bool is_rule_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

// GBNF text (as json_schema_to_gbnf writes it: one rule per line) with every rule name, defined
// or referenced, given `prefix`, so several schemas' grammars can live in one. Literals, classes
// and repetition counts are copied as they are.
std::string prefix_rules(const std::string& gbnf, const std::string& prefix) {
  std::string out;
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[' || c == '{') {
      const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
      size_t j = i + 1;
      while (j < gbnf.size() && gbnf[j] != close) j += gbnf[j] == '\\' ? 2 : 1;
      out.append(gbnf, i, j + 1 - i);
      i = j + 1;
    } else if (c == '#') {
      const size_t j = gbnf.find('\n', i);
      out.append(gbnf, i, (j == std::string::npos ? gbnf.size() : j) - i);
      i = j == std::string::npos ? gbnf.size() : j;
    } else if (is_rule_char(c)) {
      size_t j = i;
      while (j < gbnf.size() && is_rule_char(gbnf[j])) ++j;
      out += prefix;
      out.append(gbnf, i, j - i);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace

ToolCallFormat tool_call_format(const ChatTemplate& chat_template) {
  const std::string& source = chat_template.source();
  if (source.find("tools") == std::string::npos) return ToolCallFormat::Fallback;
  if (source.find("<tool_call>") != std::string::npos) return ToolCallFormat::Hermes;
  if (source.find("\"parameters\": dictionary of argument name") != std::string::npos) {
    return ToolCallFormat::Llama3Json;
  }
  return ToolCallFormat::Fallback;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3Json:
      return "llama3-json";
    case ToolCallFormat::Fallback:
      break;
  }
  return "fallback";
}

std::string fallback_tools_block(const nlohmann::ordered_json& tools) {
  std::string block(kFallbackInstructions);
  for (const auto& tool : tools) block += "\n" + tool.dump();
  block += kFallbackCallFormat;
  return block;
}

std::vector<ChatMessage> fallback_tool_messages(std::span<const ChatMessage> messages,
                                                const nlohmann::ordered_json& tools) {
  std::vector<ChatMessage> out;
  if (!tools.is_null()) {
    const std::string block = fallback_tools_block(tools);
    if (!messages.empty() && messages.front().role == "system") {
      out.push_back({"system", messages.front().content + "\n\n" + block, {}, {}});
      messages = messages.subspan(1);
    } else {
      out.push_back({"system", block, {}, {}});
    }
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      const std::string response = "<tool_response>\n" + m.content + "\n</tool_response>";
      if (!out.empty() && out.back().role == "user" && out.back().content.starts_with("<tool_response>")) {
        out.back().content += "\n" + response;
      } else {
        out.push_back({"user", response, {}, {}});
      }
      continue;
    }
    ChatMessage plain{m.role, m.content, {}, {}};
    for (const ChatToolCall& call : m.tool_calls) {
      if (!plain.content.empty()) plain.content += "\n";
      plain.content += hermes_call_text(call);
    }
    out.push_back(std::move(plain));
  }
  return out;
}

std::string tool_call_gbnf(ToolCallFormat format, std::span<const ToolSchema> tools, bool parallel) {
  const bool llama = format == ToolCallFormat::Llama3Json;
  std::string rules;
  std::string alternatives;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string prefix = "t" + std::to_string(i) + "-";
    rules += prefix_rules(json_schema_to_gbnf(tools[i].parameters), prefix);
    if (!rules.empty() && rules.back() != '\n') rules += '\n';
    nlohmann::ordered_json name = tools[i].name;
    const std::string head = name.dump() + (llama ? ", \"parameters\": " : ", \"arguments\": ");
    alternatives += std::string(i ? " | " : "") + gbnf_literal(head) + " " + prefix + "root";
  }
  std::string call = gbnf_literal("{\"name\": ") + " ( " + alternatives + " ) " + gbnf_literal("}");
  if (!llama) call = gbnf_literal("<tool_call>\n") + " " + call + " " + gbnf_literal("\n</tool_call>");
  std::string root = "root ::= call";
  if (parallel && !llama) root += " ( " + gbnf_literal("\n") + " call )*";
  return root + "\ncall ::= " + call + "\n" + rules;
}

}  // namespace peregrine
