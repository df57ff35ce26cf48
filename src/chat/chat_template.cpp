#include "chat/chat_template.h"

#include <cstdint>
#include <new>

#include "chat/jinja_ast.h"
#include "chat/jinja_eval.h"
#include "util/json_depth.h"

namespace peregrine {

namespace {

// ChatML, as Qwen2 and OpenHermes use it, without a default system message.
constexpr std::string_view kFallbackTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

jinja::Value to_value(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return jinja::Value(jinja::None{});
    case nlohmann::ordered_json::value_t::boolean:
      return jinja::Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return jinja::Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return j.get<uint64_t>() <= INT64_MAX ? jinja::Value(static_cast<int64_t>(j.get<uint64_t>()))
                                            : jinja::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::number_float:
      return jinja::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return jinja::Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::List list;
      for (const auto& item : j) list.push_back(to_value(item));
      return jinja::Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), to_value(it.value()));
      return jinja::Value(std::move(d));
    }
    default:
      break;
  }
  return jinja::Value();
}

// A call's arguments as the template sees them: the JSON value, or the text when it is not JSON.
// JSON nested deeper than kMaxJsonDepth stays text: to_value recurses once per level.
jinja::Value arguments_value(const std::string& arguments) {
  if (json_nesting_depth(arguments) > kMaxJsonDepth) return jinja::Value(arguments);
  auto parsed = nlohmann::ordered_json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? jinja::Value(arguments) : to_value(parsed);
}

jinja::Value message_value(const ChatMessage& m) {
  jinja::Dict d;
  d.items = {{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}};
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ChatToolCall& c : m.tool_calls) {
      jinja::Dict function;
      function.items = {{"name", jinja::Value(c.name)}, {"arguments", arguments_value(c.arguments)}};
      jinja::Dict call;
      call.items = {{"id", jinja::Value(c.id)},
                    {"type", jinja::Value("function")},
                    {"function", jinja::Value(std::move(function))}};
      calls.emplace_back(std::move(call));
    }
    d.items.emplace_back("tool_calls", jinja::Value(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.items.emplace_back("tool_call_id", jinja::Value(m.tool_call_id));
  return jinja::Value(std::move(d));
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> program) : program_(std::move(program)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
  return ChatTemplate(jinja::parse_template(std::string(source)));
}

ChatTemplate ChatTemplate::fallback() {
  static const ChatTemplate chatml = parse(kFallbackTemplate);
  return chatml;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 std::string_view bos_token, std::string_view eos_token,
                                 const nlohmann::ordered_json& tools) const {
  jinja::List list;
  list.reserve(messages.size());
  for (const auto& m : messages) list.push_back(message_value(m));
  jinja::Dict context;
  context.items = {{"messages", jinja::Value(std::move(list))},
                   {"add_generation_prompt", jinja::Value(add_generation_prompt)},
                   {"bos_token", jinja::Value(bos_token)},
                   {"eos_token", jinja::Value(eos_token)}};
  if (!tools.is_null()) context.items.emplace_back("tools", to_value(tools));
  try {
    return jinja::render(*program_, context, jinja::RenderOptions{});
  } catch (const std::bad_alloc&) {
    throw ChatTemplateError("chat template: out of memory while rendering");
  }
}

const std::string& ChatTemplate::source() const { return program_->source; }

}  // namespace peregrine
