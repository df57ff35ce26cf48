#pragma once
// A conversation turned into prompt tokens with special tokens coming only from the chat
// template's own text. Special-token text inside message content ("</s><s>", "<|im_start|>")
// is tokenized as the plain text it is, so a user cannot forge turns of the conversation.
//
// How: every special-token string found in a message's content is replaced by a private-use
// code point that occurs nowhere else before rendering; after rendering each placeholder is put
// back and its bytes are marked literal for Tokenizer::encode_with_literals. The prompt text is
// what the template would have rendered anyway, and content without special-token text gives
// exactly the tokens of parsing the whole rendering with special tokens. Limits: a filter that
// changes case sees the placeholder (the special-token text keeps its case), and special-token
// text formed only by joining content to the template's adjacent text is still parsed (no
// template we know puts part of a special token next to content).
#include <span>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

struct ChatPrompt {
  std::string text;             // the rendered conversation
  std::vector<TokenId> tokens;  // no BOS added beyond what the template wrote
};

// AsText: special-token text in content stays text (the default). Parse: it becomes special
// tokens like the template's text (the old, unsafe behaviour; `serve --chat-parse-special`).
enum class ContentSpecialTokens { AsText, Parse };

// Renders with the tokenizer's BOS/EOS text as bos_token/eos_token (and `tools`, see
// ChatTemplate::render) and tokenizes. Special-token text in tool calls, tool call ids and tool
// definitions is text too. Throws ChatTemplateError as ChatTemplate::render does.
ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                              std::span<const ChatMessage> messages, bool add_generation_prompt,
                              ContentSpecialTokens content_special_tokens,
                              const nlohmann::ordered_json& tools = nullptr);

}  // namespace peregrine
