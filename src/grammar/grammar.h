#pragma once
// A context-free grammar over bytes: what constrained decoding holds generated text to. GBNF text
// (gbnf.h) and JSON schemas (json_schema.h) compile to it; GrammarMatcher (matcher.h) runs it and
// TokenConstraint (token_constraint.h) turns its state into the set of tokens that may come next.
//
// Layout: every rule is a list of alternatives; an alternative is a run of elements in the one
// `elements` array, ending with an End element. A position is an index into `elements`. Terminals
// are sets of bytes (a code point of several UTF-8 bytes is a run of terminals), so the matcher
// never decodes UTF-8 and a token may end in the middle of a character.
//
// Guarantees of a built Grammar (grammar_builder.h checks them): every referenced rule exists,
// no rule can reach itself without consuming a byte (no left recursion, no repetition of
// something that matches the empty string), so expanding a position always terminates.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace peregrine {

// A grammar that does not parse or compile, a schema keyword that is not supported, or a grammar
// too ambiguous to run within bounds. The message says where and what, e.g.
// "grammar: line 3, column 12: expected '::=' after the rule name". A UsageError: it is always
// about what a user wrote.
class GrammarError : public UsageError {
 public:
  using UsageError::UsageError;
};

// 256 bits, one per byte value.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  auto operator<=>(const ByteSet&) const = default;
};

struct GrammarElement {
  enum class Kind : uint8_t { Bytes, Rule, End };
  Kind kind = Kind::End;
  uint32_t value = 0;  // Bytes: index into Grammar::byte_sets; Rule: index into Grammar::rules
};

struct GrammarRule {
  std::string name;                    // as written, or "<parent>-<n>" for groups and repetitions
  std::vector<uint32_t> alternatives;  // first position of each alternative
  bool nullable = false;               // matches the empty string
};

struct Grammar {
  std::vector<GrammarElement> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<GrammarRule> rules;
  uint32_t root = 0;

  const GrammarElement& at(uint32_t pos) const { return elements[pos]; }
  bool is_bytes(uint32_t pos) const { return elements[pos].kind == GrammarElement::Kind::Bytes; }
  // Whether the terminal at `pos` (a Bytes element) takes byte b.
  bool takes(uint32_t pos, uint8_t b) const { return byte_sets[elements[pos].value].has(b); }
};

// Limits on what a grammar may cost to build and run; each is a GrammarError when passed.
inline constexpr size_t kMaxGrammarElements = size_t{1} << 20;  // after repetitions are expanded
inline constexpr size_t kMaxGrammarRules = size_t{1} << 16;
inline constexpr size_t kMaxParseStacks = 1024;  // live parse stacks of one matcher state
// Expansion work (following rule references and rule ends until every stack tops on a terminal)
// is bounded per operation, not per stack, so many alternatives that each expand cheaply cannot
// add up to unbounded work: the start state (every alternative of the root) gets one budget, one
// byte's advance (every stack) another, one token mask (every trie walk it takes) a third.
inline constexpr size_t kMaxStartSteps = size_t{1} << 18;
inline constexpr size_t kMaxAdvanceSteps = size_t{1} << 18;
inline constexpr size_t kMaxMaskSteps = size_t{1} << 22;

}  // namespace peregrine
