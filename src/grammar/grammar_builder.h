#pragma once
// GBNF syntax trees (gbnf.h) to a byte-level Grammar (grammar.h): literals become runs of
// single-byte terminals, character classes become byte sets (ASCII) or alternatives of UTF-8 byte
// patterns (utf8_ranges.h), groups become rules of their own, and repetitions expand:
//   x{2,4} -> x x o2   o2 ::= x o1 | ""   o1 ::= x | ""        x* -> s   s ::= x s | ""
// The loops are tail calls, which the matcher runs without growing its stacks.
#include <string_view>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"

namespace peregrine {

// Throws GrammarError for a rule defined twice, an undefined rule, a missing start rule, left
// recursion (a rule reaching itself without consuming input: `a ::= a "x"`, `a ::= ("x"?)* `),
// or more than kMaxGrammarElements / kMaxGrammarRules after expansion. `source` is the text the
// rules were parsed from (for line and column in messages).
Grammar build_grammar(const std::vector<GbnfRule>& rules, std::string_view source, std::string_view start_rule);

}  // namespace peregrine
