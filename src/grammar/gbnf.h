#pragma once
// GBNF, llama.cpp's grammar format, parsed into a syntax tree and compiled to a Grammar.
//
//   root   ::= object                      # a rule: name ::= alternatives; `root` is the start
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   digit  ::= [0-9]  hex ::= [0-9a-fA-F]  # classes: ranges, negation [^...], escapes
//   any    ::= .                           # any one character (code point)
//   ws     ::= [ \t\n]{0,20}               # repetitions: * + ? {m} {m,} {m,n} {,n}
//
// Literals and classes take the escapes \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH (code
// points, UTF-8 encoded); `#` starts a comment. A rule ends at the end of its line unless a
// parenthesis is open or the line ends with `|`; a `|` at the start of the next line continues it
// too. Rule names are letters, digits, `-` and `_`. Left recursion (`expr ::= expr "+" term`) is
// refused, as in llama.cpp: write `expr ::= term ("+" term)*`.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace peregrine {

inline constexpr uint32_t kUnbounded = UINT32_MAX;
inline constexpr uint32_t kMaxRepetition = 100000;  // bound in {m,n}
inline constexpr size_t kMaxGrammarNesting = 128;   // parentheses inside one another

struct GbnfNode {
  enum class Kind : uint8_t { Choice, Sequence, Literal, Class, Ref, Repeat };
  Kind kind = Kind::Sequence;
  std::vector<GbnfNode> items;    // Choice: alternatives; Sequence: elements; Repeat: [body]
  std::string text;               // Literal: its bytes; Ref: the rule name
  std::vector<CodeRange> ranges;  // Class: the code points it matches (negation applied)
  uint32_t min = 0;               // Repeat
  uint32_t max = 0;               // Repeat; kUnbounded for * and +
  size_t offset = 0;              // where it starts in the source text
};

struct GbnfRule {
  std::string name;
  GbnfNode body;  // a Choice
  size_t offset = 0;
};

// Syntax only. Throws GrammarError("grammar: line L, column C: ...").
std::vector<GbnfRule> parse_gbnf(std::string_view text);

// parse_gbnf, then build_grammar (grammar_builder.h) from rule `root`.
Grammar compile_gbnf(std::string_view text);

// "line L, column C" of a byte offset (columns count characters, from 1).
std::string source_position(std::string_view text, size_t offset);

}  // namespace peregrine
