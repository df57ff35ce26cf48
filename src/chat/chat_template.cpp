#include "chat/chat_template.h"

namespace peregrine {
namespace jinja {
struct Template {
  std::string source;
};
}  // namespace jinja

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> program)
    : program_(std::move(program)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
  return ChatTemplate(std::make_shared<jinja::Template>(jinja::Template{std::string(source)}));
}

ChatTemplate ChatTemplate::fallback() { return parse(""); }

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 std::string_view, std::string_view) const {
  // Placeholder until the interpreter lands: ChatML.
  std::string out;
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

const std::string& ChatTemplate::source() const { return program_->source; }

}  // namespace peregrine
