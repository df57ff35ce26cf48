#include "server/tool_request.h"

#include <algorithm>
#include <set>

#include "grammar/json_schema.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace peregrine::server {
namespace {

// OpenAI's rule for function names: a-z, A-Z, 0-9, underscores and dashes, at most 64.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

ToolSchema parse_tool(const nlohmann::json& tool, const std::string& param) {
  if (!tool.is_object()) throw invalid_request("'" + param + "' must be an object", param);
  if (read_string(tool, "type").value_or("") != "function") {
    throw invalid_request("'" + param + ".type' must be 'function'", param + ".type");
  }
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object()) {
    throw invalid_request("'" + param + ".function' must be an object", param + ".function");
  }
  const std::string fparam = param + ".function";
  ToolSchema s;
  s.name = read_string(*fn, "name").value_or("");
  if (!valid_function_name(s.name)) {
    throw invalid_request("'" + fparam + ".name' must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'",
                          fparam + ".name");
  }
  read_string(*fn, "description");  // type-checked only
  read_bool(*fn, "strict");
  auto params = fn->find("parameters");
  if (params == fn->end() || params->is_null()) {
    s.parameters = {{"type", "object"}};
  } else {
    if (!params->is_object()) {
      throw invalid_request("'" + fparam + ".parameters' must be a JSON schema (an object)", fparam + ".parameters");
    }
    s.parameters = nlohmann::ordered_json::parse(params->dump());
  }
  return s;
}

// A schema the grammar compiler cannot take is refused now, whatever tool_choice is, so a tool
// list that works with "auto" also works with "required".
void check_schema(const ToolSchema& s, const std::string& param) {
  const std::string text = s.parameters.dump();
  if (text.size() > kMaxToolSchemaBytes) {
    throw invalid_request("the parameters schema is over " + std::to_string(kMaxToolSchemaBytes) + " bytes", param);
  }
  try {
    json_schema_to_gbnf(s.parameters);
  } catch (const GrammarError& e) {
    throw invalid_request(std::string(e.what()), param);
  }
}

ToolRequest::Choice parse_choice(const nlohmann::json& body, std::string& named) {
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return ToolRequest::Choice::Auto;
  if (it->is_string()) {
    const std::string c = it->get<std::string>();
    if (c == "none") return ToolRequest::Choice::None;
    if (c == "auto") return ToolRequest::Choice::Auto;
    if (c == "required") return ToolRequest::Choice::Required;
  } else if (it->is_object() && read_string(*it, "type").value_or("") == "function") {
    auto fn = it->find("function");
    if (fn != it->end() && fn->is_object()) {
      if (auto name = read_string(*fn, "name")) {
        named = *name;
        return ToolRequest::Choice::Named;
      }
    }
  }
  throw invalid_request(
      "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}",
      "tool_choice");
}

}  // namespace

std::vector<std::string> ToolRequest::names() const {
  std::vector<std::string> out;
  for (const ToolSchema& s : schemas) out.push_back(s.name);
  return out;
}

std::vector<ToolSchema> ToolRequest::callable() const {
  if (choice != Choice::Named) return schemas;
  std::vector<ToolSchema> out;
  for (const ToolSchema& s : schemas) {
    if (s.name == named) out.push_back(s);
  }
  return out;
}

ToolRequest parse_tool_request(const nlohmann::json& body) {
  ToolRequest r;
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  if (has_tools) {
    if (!tools->is_array()) throw invalid_request("'tools' must be a list of tools", "tools");
    if (tools->size() > kMaxTools) {
      throw invalid_request("'tools' holds at most " + std::to_string(kMaxTools) + " tools", "tools");
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = "tools[" + std::to_string(i) + "]";
      ToolSchema s = parse_tool((*tools)[i], param);
      if (!seen.insert(s.name).second) {
        throw invalid_request("two tools are named '" + s.name + "'", param + ".function.name");
      }
      check_schema(s, param + ".function.parameters");
      r.schemas.push_back(std::move(s));
    }
    if (!tools->empty()) r.tools = nlohmann::ordered_json::parse(tools->dump());
  }
  r.choice = parse_choice(body, r.named);
  const bool choice_given = body.contains("tool_choice") && !body["tool_choice"].is_null();
  if (choice_given && r.tools.is_null() && r.choice != ToolRequest::Choice::None) {
    throw invalid_request("'tool_choice' is only allowed when 'tools' are specified", "tool_choice");
  }
  if (r.choice == ToolRequest::Choice::Named) {
    const auto names = r.names();
    if (std::find(names.begin(), names.end(), r.named) == names.end()) {
      throw invalid_request(
          "'tool_choice' names the function '" + clip_client_text(r.named) + "', which is not in 'tools'",
          "tool_choice");
    }
  }
  r.parallel = read_bool(body, "parallel_tool_calls").value_or(true);
  return r;
}

void restore_tools_order(ToolRequest& tools, const std::string& body) {
  if (tools.tools.is_null()) return;
  tools.tools = nlohmann::ordered_json::parse(body)["tools"];
  for (size_t i = 0; i < tools.schemas.size(); ++i) {
    const auto& fn = tools.tools[i]["function"];
    if (fn.contains("parameters") && !fn["parameters"].is_null()) tools.schemas[i].parameters = fn["parameters"];
  }
}

void read_message_tool_fields(const nlohmann::json& m, const std::string& param, ChatMessage& out) {
  if (out.role == "tool") {
    auto id = read_string(m, "tool_call_id");
    if (!id)
      throw invalid_request("'" + param + ".tool_call_id' is required for a tool message", param + ".tool_call_id");
    out.tool_call_id = *id;
    return;
  }
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return;
  const std::string cparam = param + ".tool_calls";
  if (out.role != "assistant") throw invalid_request("'" + cparam + "' is only allowed in assistant messages", cparam);
  if (!calls->is_array()) throw invalid_request("'" + cparam + "' must be a list", cparam);
  if (calls->size() > kMaxToolCallsPerMessage) {
    throw invalid_request("'" + cparam + "' holds at most " + std::to_string(kMaxToolCallsPerMessage) + " calls",
                          cparam);
  }
  for (size_t i = 0; i < calls->size(); ++i) {
    const nlohmann::json& c = (*calls)[i];
    const std::string p = cparam + "[" + std::to_string(i) + "]";
    if (!c.is_object()) throw invalid_request("'" + p + "' must be an object", p);
    if (auto type = read_string(c, "type"); type && *type != "function") {
      throw invalid_request("'" + p + ".type' must be 'function'", p + ".type");
    }
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object())
      throw invalid_request("'" + p + ".function' must be an object", p + ".function");
    auto name = fn->find("name");
    auto arguments = fn->find("arguments");
    if (name == fn->end() || !name->is_string() || arguments == fn->end() || !arguments->is_string()) {
      throw invalid_request("'" + p + ".function' needs a 'name' and 'arguments' (a JSON string)", p + ".function");
    }
    out.tool_calls.push_back(
        {read_string(c, "id").value_or(""), name->get<std::string>(), arguments->get<std::string>()});
  }
}

}  // namespace peregrine::server
