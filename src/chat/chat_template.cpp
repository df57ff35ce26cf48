#include "chat/chat_template.h"

#include <cstdint>
#include <new>

#include "chat/jinja_ast.h"
#include "chat/jinja_eval.h"

namespace peregrine {

namespace {

// ChatML, as Qwen2 and OpenHermes use it, without a default system message.
constexpr std::string_view kFallbackTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

chat::Value to_value(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return chat::Value(chat::None{});
    case nlohmann::ordered_json::value_t::boolean:
      return chat::Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return chat::Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return j.get<uint64_t>() <= INT64_MAX ? chat::Value(static_cast<int64_t>(j.get<uint64_t>()))
                                            : chat::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::number_float:
      return chat::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return chat::Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      chat::List list;
      for (const auto& item : j) list.push_back(to_value(item));
      return chat::Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      chat::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), to_value(it.value()));
      return chat::Value(std::move(d));
    }
    default:
      break;
  }
  return chat::Value();
}

// A call's arguments as the template sees them: the JSON value, or the text when it is not JSON.
chat::Value arguments_value(const std::string& arguments) {
  auto parsed = nlohmann::ordered_json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? chat::Value(arguments) : to_value(parsed);
}

chat::Value message_value(const ChatMessage& m) {
  chat::Dict d;
  d.items = {{"role", chat::Value(m.role)}, {"content", chat::Value(m.content)}};
  if (!m.tool_calls.empty()) {
    chat::List calls;
    for (const ChatToolCall& c : m.tool_calls) {
      chat::Dict function;
      function.items = {{"name", chat::Value(c.name)}, {"arguments", arguments_value(c.arguments)}};
      chat::Dict call;
      call.items = {{"id", chat::Value(c.id)},
                    {"type", chat::Value("function")},
                    {"function", chat::Value(std::move(function))}};
      calls.emplace_back(std::move(call));
    }
    d.items.emplace_back("tool_calls", chat::Value(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.items.emplace_back("tool_call_id", chat::Value(m.tool_call_id));
  return chat::Value(std::move(d));
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const chat::Template> program) : program_(std::move(program)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
  return ChatTemplate(chat::parse_template(std::string(source)));
}

ChatTemplate ChatTemplate::fallback() {
  static const ChatTemplate chatml = parse(kFallbackTemplate);
  return chatml;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 std::string_view bos_token, std::string_view eos_token,
                                 const nlohmann::ordered_json& tools) const {
  chat::List list;
  list.reserve(messages.size());
  for (const auto& m : messages) list.push_back(message_value(m));
  chat::Dict context;
  context.items = {{"messages", chat::Value(std::move(list))},
                   {"add_generation_prompt", chat::Value(add_generation_prompt)},
                   {"bos_token", chat::Value(bos_token)},
                   {"eos_token", chat::Value(eos_token)}};
  if (!tools.is_null()) context.items.emplace_back("tools", to_value(tools));
  try {
    return chat::render(*program_, context, chat::RenderOptions{});
  } catch (const std::bad_alloc&) {
    throw ChatTemplateError("chat template: out of memory while rendering");
  }
}

const std::string& ChatTemplate::source() const { return program_->source; }

}  // namespace peregrine
