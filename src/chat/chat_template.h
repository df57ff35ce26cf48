#pragma once
// Chat templates: renders a conversation into a prompt string with the model's own Jinja
// template (GGUF key tokenizer.chat_template), or a ChatML fallback when the model has none.
// The interpreter is a small Jinja2 subset of our own (see docs/chat_templates.md): enough for
// the published templates of Llama 2/3, Mistral, Qwen2/ChatML, Phi-3, Gemma and Zephyr.
// Templates may come from users (--chat-template FILE), so parsing and rendering are bounded:
// output size, loop iterations, recursion depth; every failure is a ChatTemplateError.
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.h"

namespace peregrine {

// A template failed to parse ("chat template:3:14: expected '%}'") or to render ("undefined
// filter 'foo'"), or the template itself called raise_exception(msg) -- then what() is exactly
// msg, so the server can return it to the client as an HTTP 400.
class ChatTemplateError : public UsageError {
 public:
  using UsageError::UsageError;
};

// One function call an assistant message made (OpenAI's tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the API carries it
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_, std::vector<ChatToolCall> tool_calls_ = {},
              std::string tool_call_id_ = {})
      : role(std::move(role_)),
        content(std::move(content_)),
        tool_calls(std::move(tool_calls_)),
        tool_call_id(std::move(tool_call_id_)) {}

  std::string role;
  std::string content;                   // already flattened to text
  std::vector<ChatToolCall> tool_calls;  // assistant messages that called tools
  std::string tool_call_id;              // role "tool": the call this result answers
};

namespace chat {
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

  // Renders with context: messages (list of {role, content}, plus tool_calls as
  // [{id, type: "function", function: {name, arguments}}] and tool_call_id where a message has
  // them), add_generation_prompt, bos_token, eos_token, and `tools` (OpenAI's tool list as given,
  // undefined when null). A call's arguments are given to the template as the JSON value they
  // spell (templates write `arguments | tojson`, as transformers passes dicts), or as the string
  // when it is not JSON. Throws ChatTemplateError on runtime errors (including the template's
  // raise_exception) and when a limit is exceeded.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string_view bos_token,
                     std::string_view eos_token, const nlohmann::ordered_json& tools = nullptr) const;

  // The template source as given to parse().
  const std::string& source() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const chat::Template> program);
  std::shared_ptr<const chat::Template> program_;  // immutable, shared by copies
};

}  // namespace peregrine
