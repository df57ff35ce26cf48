#pragma once
// Chat templates: renders a conversation into a prompt string with the model's own Jinja
// template (GGUF key tokenizer.chat_template), or a ChatML fallback when the model has none.
// The interpreter is a small Jinja2 subset of our own (see docs/chat_templates.md): enough for
// the published templates of Llama 2/3, Mistral, Qwen2/ChatML, Phi-3, Gemma and Zephyr.
// Templates may come from users (--chat-template FILE), so parsing and rendering are bounded:
// output size, loop iterations, recursion depth; every failure is a ChatTemplateError.
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "util/error.h"

namespace peregrine {

// A template failed to parse ("chat template:3:14: expected '%}'") or to render ("undefined
// filter 'foo'"), or the template itself called raise_exception(msg) -- then what() is exactly
// msg, so the server can return it to the client as an HTTP 400.
class ChatTemplateError : public UsageError {
 public:
  using UsageError::UsageError;
};

struct ChatMessage {
  std::string role;
  std::string content;  // already flattened to text
};

namespace jinja {
struct Template;  // parsed program (jinja_ast.h)
}

class ChatTemplate {
 public:
  // Parses a Jinja template. Throws ChatTemplateError naming line:column on a syntax error.
  static ChatTemplate parse(std::string_view source);
  // The built-in fallback for models without tokenizer.chat_template: ChatML
  // ("<|im_start|>role\ncontent<|im_end|>\n" per message, "<|im_start|>assistant\n" as the
  // generation prompt), no default system message.
  static ChatTemplate fallback();

  // Renders with context: messages (list of {role, content}), add_generation_prompt, bos_token,
  // eos_token; tools is undefined. Throws ChatTemplateError on runtime errors (including the
  // template's raise_exception) and when a limit is exceeded.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     std::string_view bos_token, std::string_view eos_token) const;

  // The template source as given to parse().
  const std::string& source() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> program);
  std::shared_ptr<const jinja::Template> program_;  // immutable, shared by copies
};

}  // namespace peregrine
