#pragma once
// Splits a template into tokens: raw text, tag delimiters and the expression tokens inside tags.
// Whitespace control follows transformers' chat-template environment: trim_blocks and
// lstrip_blocks are on (the first newline after a block tag or comment is dropped; spaces and
// tabs before a block tag at the start of a line are dropped), and `{%-`, `-%}`, `{{-`, `-}}`,
// `{#-`, `-#}` strip all whitespace on that side; `{%+` keeps the leading whitespace.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::chat {

enum class TokenKind {
  Text,        // raw template text, text holds it (already whitespace-controlled)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifier or keyword
  String,      // string literal, text holds the unescaped value
  Int,
  Float,
  Op,          // operator or punctuation, text holds it: + - * / // % ~ == != < <= > >= ( ) ...
  End,         // end of template
};

struct Token {
  TokenKind kind;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Throws ChatTemplateError ("chat template:LINE:COL: ...") on an unterminated tag, comment or
// string, or a character that cannot start a token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace peregrine::chat
