#pragma once
// The state of matching text against a Grammar, one byte at a time: the set of parse stacks that
// are still possible (a pushdown recognizer with every alternative followed at once, as
// llama.cpp's grammar sampler does). A stack lists positions from the bottom frame to the top:
// the top is the terminal the next byte must match; the frames below are where to continue when
// the rule above ends. An empty stack means the text so far is a complete sentence.
//
// Stacks are kept expanded (every top is a terminal or the stack is empty) and deduplicated.
// Rules that end in a reference continue in place (a tail call), so loops such as x* and
// right-recursive lists do not grow the stacks.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace peregrine {

using ParseStack = std::vector<uint32_t>;  // positions, bottom first

class GrammarMatcher {
 public:
  // At the start of the grammar's root rule. Throws GrammarError when the start is too ambiguous
  // (more than kMaxParseStacks stacks) or costs more than kMaxStartSteps to expand. Build it once
  // per grammar and copy it (TokenConstraint::start does).
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Consumes one byte; false (state unchanged) when the grammar does not allow it here. Throws
  // GrammarError when the result is too ambiguous or costs more than kMaxAdvanceSteps.
  bool accept_byte(uint8_t b);
  // Consumes all the bytes or none; false when some byte is not allowed.
  bool accept_bytes(std::string_view bytes);

  bool is_accepting() const;  // the text so far is a complete sentence of the grammar
  bool can_continue() const;  // some byte may still follow
  const std::vector<ParseStack>& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }

 private:
  std::vector<ParseStack> advance(uint8_t b) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<ParseStack> stacks_;  // sorted, unique
};

// Expands `stack` (whose top may be a rule reference or the end of an alternative) into stacks
// whose tops are terminals, or the empty stack, appending them to `out`. Each step taken is
// counted off `budget`, which the caller shares between the stacks of one operation. Throws
// GrammarError when the budget runs out or `out` passes 4 * kMaxParseStacks stacks.
void expand_stack(const Grammar& g, ParseStack stack, std::vector<ParseStack>& out, size_t& budget);

}  // namespace peregrine
