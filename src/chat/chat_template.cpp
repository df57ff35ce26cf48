#include "chat/chat_template.h"

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

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> program)
    : program_(std::move(program)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
  return ChatTemplate(jinja::parse_template(std::string(source)));
}

ChatTemplate ChatTemplate::fallback() {
  static const ChatTemplate chatml = parse(kFallbackTemplate);
  return chatml;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 std::string_view bos_token, std::string_view eos_token) const {
  jinja::List list;
  list.reserve(messages.size());
  for (const auto& m : messages) {
    jinja::Dict d;
    d.items = {{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}};
    list.emplace_back(std::move(d));
  }
  jinja::Dict context;
  context.items = {{"messages", jinja::Value(std::move(list))},
                   {"add_generation_prompt", jinja::Value(add_generation_prompt)},
                   {"bos_token", jinja::Value(bos_token)},
                   {"eos_token", jinja::Value(eos_token)}};
  try {
    return jinja::render(*program_, context, jinja::RenderOptions{});
  } catch (const std::bad_alloc&) {
    throw ChatTemplateError("chat template: out of memory while rendering");
  }
}

const std::string& ChatTemplate::source() const { return program_->source; }

}  // namespace peregrine
