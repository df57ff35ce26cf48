#pragma once
// Renders template snippets through the interpreter directly, with a chosen context.
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_eval.h"

namespace peregrine::test {

inline chat::Dict sample_context() {
  chat::Dict m0, m1;
  m0.items = {{"role", chat::Value("system")}, {"content", chat::Value("  Be brief.  ")}};
  m1.items = {{"role", chat::Value("user")}, {"content", chat::Value("Hi")}};
  chat::Dict ctx;
  ctx.items = {{"messages", chat::Value(chat::List{chat::Value(m0), chat::Value(m1)})},
               {"add_generation_prompt", chat::Value(true)},
               {"bos_token", chat::Value("<s>")},
               {"eos_token", chat::Value("</s>")}};
  return ctx;
}

inline std::string jinja_render(std::string_view src, const chat::Dict& ctx = sample_context(),
                                const chat::RenderOptions& opts = {}) {
  auto tmpl = chat::parse_template(std::string(src));
  return chat::render(*tmpl, ctx, opts);
}

// The ChatTemplateError message from parsing or rendering ("" if none is thrown).
inline std::string jinja_error(std::string_view src, const chat::RenderOptions& opts = {}) {
  try {
    jinja_render(src, sample_context(), opts);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

}  // namespace peregrine::test
