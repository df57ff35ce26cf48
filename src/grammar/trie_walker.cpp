#include "grammar/trie_walker.h"

#include <algorithm>

namespace peregrine {
namespace {

using Kind = GrammarElement::Kind;

void add_interval(std::vector<RankInterval>* out, uint32_t begin, uint32_t end) {
  if (out == nullptr || begin >= end) return;
  if (!out->empty() && out->back().end == begin) {
    out->back().end = end;
  } else {
    out->push_back({begin, end});
  }
}

[[noreturn]] void too_ambiguous() {
  throw GrammarError("grammar: too ambiguous (more than " + std::to_string(kMaxParseStacks) +
                     " parse stacks at one point); rewrite it so fewer alternatives match the same text");
}

}  // namespace

TrieWalker::TrieWalker(const Grammar& grammar, const VocabTrie& trie)
    : g_(grammar), trie_(trie), levels_(trie.max_depth() + 2) {}

int32_t TrieWalker::frame(uint32_t pos, int32_t parent) {
  arena_.push_back({pos, parent});
  return static_cast<int32_t>(arena_.size() - 1);
}

// Expands the stack whose top frame is `top` until every top is a terminal (appended to out).
// Reaching the bottom: in a local walk the stack left the terminal's rule (escaped); in a full
// walk the text is complete there and takes no more bytes.
void TrieWalker::expand(int32_t top, std::vector<int32_t>& out, bool& escaped) {
  work_.clear();
  work_.push_back(top);
  size_t steps = 0;
  while (!work_.empty()) {
    if (++steps > 64 * kMaxParseStacks) too_ambiguous();
    const int32_t n = work_.back();
    work_.pop_back();
    if (n < 0) {
      escaped = escaped || local_;
      continue;
    }
    const Frame f = arena_[static_cast<size_t>(n)];
    const GrammarElement& e = g_.at(f.pos);
    if (e.kind == Kind::Bytes) {
      out.push_back(n);
    } else if (e.kind == Kind::End) {
      work_.push_back(f.parent);
    } else {
      const uint32_t ret = f.pos + 1;
      const int32_t below = g_.at(ret).kind == Kind::End ? f.parent : frame(ret, f.parent);  // tail call
      for (uint32_t alt : g_.rules[e.value].alternatives) work_.push_back(frame(alt, below));
    }
  }
}

// Stacks with the same top position over the same frame below are the same stack.
void TrieWalker::dedup(std::vector<int32_t>& stacks) const {
  if (stacks.size() > 1) {
    auto key = [&](int32_t s) {
      const Frame& f = arena_[static_cast<size_t>(s)];
      return (static_cast<uint64_t>(f.pos) << 32) | static_cast<uint32_t>(f.parent);
    };
    std::sort(stacks.begin(), stacks.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
    stacks.erase(std::unique(stacks.begin(), stacks.end(), [&](int32_t a, int32_t b) { return key(a) == key(b); }),
                 stacks.end());
  }
  if (stacks.size() > kMaxParseStacks) too_ambiguous();
}

bool TrieWalker::meets_only(uint32_t begin, uint32_t end) const {
  auto it =
      std::upper_bound(only_.begin(), only_.end(), begin, [](uint32_t v, const RankInterval& r) { return v < r.end; });
  return it != only_.end() && it->begin < end;
}

// The children of trie node `node`, whose stacks are levels_[depth]. `escaped`: some stack left
// the terminal's rule on the way here, so what no stack takes below is uncertain, not refused.
void TrieWalker::visit(uint32_t node, size_t depth, bool escaped) {
  const std::vector<VocabTrie::Node>& nodes = trie_.nodes();
  const std::vector<int32_t>& here = levels_[depth];
  std::vector<int32_t>& next = levels_[depth + 1];
  for (uint32_t c = node + 1; c < nodes[node].skip; c = nodes[c].skip) {
    const VocabTrie::Node& child = nodes[c];
    if (!local_ && !meets_only(child.tok_begin, child.sub_end)) continue;
    const size_t mark = arena_.size();
    next.clear();
    bool took = false;
    bool esc = escaped;
    for (int32_t s : here) {
      const Frame f = arena_[static_cast<size_t>(s)];
      if (!g_.takes(f.pos, child.byte)) continue;
      took = true;
      expand(frame(f.pos + 1, f.parent), next, esc);
    }
    if (took) {
      add_interval(allowed_, child.tok_begin, child.tok_end);
      if (!next.empty()) {
        dedup(next);
        visit(c, depth + 1, esc);
      } else if (esc) {
        add_interval(uncertain_, child.tok_end, child.sub_end);
      }
    } else if (escaped) {
      add_interval(uncertain_, child.tok_begin, child.sub_end);
    }
    arena_.resize(mark);
  }
}

void TrieWalker::run(bool local, std::span<const RankInterval> only) {
  local_ = local;
  only_ = only;
  dedup(levels_[0]);
  visit(0, 0, false);
  arena_.clear();
  for (auto& level : levels_) level.clear();
}

void TrieWalker::walk_top(std::span<const uint32_t> top, std::vector<RankInterval>& allowed,
                          std::vector<RankInterval>& uncertain) {
  allowed_ = &allowed;
  uncertain_ = &uncertain;
  arena_.clear();
  int32_t below = -1;
  for (uint32_t pos : top) below = frame(pos, below);
  levels_[0].assign(1, below);
  run(true, {});
}

void TrieWalker::walk_stacks(std::span<const ParseStack> stacks, std::span<const RankInterval> only,
                             std::vector<RankInterval>& allowed) {
  allowed_ = &allowed;
  uncertain_ = nullptr;
  arena_.clear();
  levels_[0].clear();
  for (const ParseStack& s : stacks) {
    if (s.empty()) continue;
    int32_t below = -1;
    for (uint32_t pos : s) below = frame(pos, below);
    levels_[0].push_back(below);
  }
  run(false, only);
}

}  // namespace peregrine
