#include "grammar/matcher.h"

#include <algorithm>

namespace peregrine {
namespace {

using Kind = GrammarElement::Kind;

[[noreturn]] void too_ambiguous() {
  throw GrammarError("grammar: too ambiguous (more than " + std::to_string(kMaxParseStacks) +
                     " parse stacks at one point); rewrite it so fewer alternatives match the same text");
}

// The work budgets (grammar.h): a grammar with many ways to match the empty string could revisit
// the same stacks exponentially often before deduplication, and many alternatives could each take
// a long run of empty rules.
[[noreturn]] void too_costly() {
  throw GrammarError(
      "grammar: too costly to expand (too many steps through rule references at one point); rewrite it with fewer "
      "alternatives that start alike or fewer rules that can match empty text");
}

void sort_unique(std::vector<ParseStack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace

void expand_stack(const Grammar& g, ParseStack stack, std::vector<ParseStack>& out, size_t& budget) {
  std::vector<ParseStack> work;
  work.push_back(std::move(stack));
  while (!work.empty()) {
    if (budget == 0) too_costly();
    --budget;
    ParseStack s = std::move(work.back());
    work.pop_back();
    if (s.empty() || g.is_bytes(s.back())) {
      out.push_back(std::move(s));
      if (out.size() > 4 * kMaxParseStacks) too_ambiguous();
      continue;
    }
    const GrammarElement& e = g.at(s.back());
    if (e.kind == Kind::End) {
      s.pop_back();
      work.push_back(std::move(s));
      continue;
    }
    // A reference: continue after it once the rule ends; nothing to continue with is a tail call.
    const uint32_t ret = s.back() + 1;
    if (g.at(ret).kind == Kind::End) {
      s.pop_back();
    } else {
      s.back() = ret;
    }
    for (uint32_t alt : g.rules[e.value].alternatives) {
      ParseStack next = s;
      next.push_back(alt);
      work.push_back(std::move(next));
    }
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const GrammarRule& root = grammar_->rules[grammar_->root];
  size_t budget = kMaxStartSteps;  // one budget for every alternative
  for (uint32_t alt : root.alternatives) {
    expand_stack(*grammar_, ParseStack{alt}, stacks_, budget);
    if (stacks_.size() <= kMaxParseStacks) continue;
    sort_unique(stacks_);  // many alternatives may reach the same stacks
    if (stacks_.size() > kMaxParseStacks) too_ambiguous();
  }
  sort_unique(stacks_);
}

std::vector<ParseStack> GrammarMatcher::advance(uint8_t b) const {
  std::vector<ParseStack> next;
  size_t budget = kMaxAdvanceSteps;
  for (const ParseStack& s : stacks_) {
    if (s.empty() || !grammar_->takes(s.back(), b)) continue;
    ParseStack moved = s;
    ++moved.back();
    expand_stack(*grammar_, std::move(moved), next, budget);
  }
  sort_unique(next);
  if (next.size() > kMaxParseStacks) too_ambiguous();
  return next;
}

bool GrammarMatcher::accept_byte(uint8_t b) {
  std::vector<ParseStack> next = advance(b);
  if (next.empty()) return false;
  stacks_ = std::move(next);
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  std::vector<ParseStack> saved = stacks_;
  for (char c : bytes) {
    if (!accept_byte(static_cast<uint8_t>(c))) {
      stacks_ = std::move(saved);
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::is_accepting() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const ParseStack& s) { return s.empty(); });
}

bool GrammarMatcher::can_continue() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const ParseStack& s) { return !s.empty(); });
}

}  // namespace peregrine
