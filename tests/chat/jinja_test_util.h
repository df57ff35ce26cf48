#pragma once
// Renders template snippets through the interpreter directly, with a chosen context.
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_eval.h"

namespace peregrine::test {

inline jinja::Dict sample_context() {
  jinja::Dict m0, m1;
  m0.items = {{"role", jinja::Value("system")}, {"content", jinja::Value("  Be brief.  ")}};
  m1.items = {{"role", jinja::Value("user")}, {"content", jinja::Value("Hi")}};
  jinja::Dict ctx;
  ctx.items = {{"messages", jinja::Value(jinja::List{jinja::Value(m0), jinja::Value(m1)})},
               {"add_generation_prompt", jinja::Value(true)},
               {"bos_token", jinja::Value("<s>")},
               {"eos_token", jinja::Value("</s>")}};
  return ctx;
}

inline std::string jinja_render(std::string_view src, const jinja::Dict& ctx = sample_context(),
                                const jinja::RenderOptions& opts = {}) {
  auto tmpl = jinja::parse_template(std::string(src));
  return jinja::render(*tmpl, ctx, opts);
}

// The ChatTemplateError message from parsing or rendering ("" if none is thrown).
inline std::string jinja_error(std::string_view src, const jinja::RenderOptions& opts = {}) {
  try {
    jinja_render(src, sample_context(), opts);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

}  // namespace peregrine::test
