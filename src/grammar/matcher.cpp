#include "grammar/matcher.h"

#include <algorithm>

namespace peregrine {
namespace {

using Kind = GrammarElement::Kind;

// Expansion work is bounded too: a grammar with many ways to match the empty string could revisit
// the same stacks exponentially often before deduplication.
constexpr size_t kMaxExpansionSteps = 64 * kMaxParseStacks;

[[noreturn]] void too_ambiguous() {
  throw GrammarError("grammar: too ambiguous (more than " + std::to_string(kMaxParseStacks) +
                     " parse stacks at one point); rewrite it so fewer alternatives match the same text");
}

void sort_unique(std::vector<ParseStack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace

void expand_stack(const Grammar& g, ParseStack stack, std::vector<ParseStack>& out) {
  std::vector<ParseStack> work;
  work.push_back(std::move(stack));
  size_t steps = 0;
  while (!work.empty()) {
    if (++steps > kMaxExpansionSteps) too_ambiguous();
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
  for (uint32_t alt : root.alternatives) expand_stack(*grammar_, ParseStack{alt}, stacks_);
  sort_unique(stacks_);
  if (stacks_.size() > kMaxParseStacks) too_ambiguous();
}

std::vector<ParseStack> GrammarMatcher::advance(uint8_t b) const {
  std::vector<ParseStack> next;
  for (const ParseStack& s : stacks_) {
    if (s.empty() || !grammar_->takes(s.back(), b)) continue;
    ParseStack moved = s;
    ++moved.back();
    expand_stack(*grammar_, std::move(moved), next);
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
