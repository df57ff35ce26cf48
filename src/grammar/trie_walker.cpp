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

[[noreturn]] void too_costly() {
  throw GrammarError("grammar: too costly to find the tokens allowed here (more than " + std::to_string(kMaxMaskSteps) +
                     " steps through rule references); rewrite it with fewer alternatives that start alike");
}

}  // namespace

TrieWalker::TrieWalker(const Grammar& grammar, const VocabTrie& trie) : g_(grammar), trie_(trie) {}

void TrieWalker::reset(bool local, std::span<const RankInterval> only) {
  local_ = local;
  only_ = only;
  frames_.clear();
  frame_ids_.clear();
  sets_.clear();
  set_ids_.clear();
  steps_.clear();
}

int32_t TrieWalker::frame(uint32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(parent);
  auto [it, added] = frame_ids_.emplace(key, static_cast<int32_t>(frames_.size()));
  if (added) frames_.push_back({pos, parent});
  return it->second;
}

// Frames are interned, so equal stacks have equal top frames: a sorted, unique list of them
// identifies the set exactly.
int32_t TrieWalker::intern(std::vector<int32_t>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxParseStacks) too_ambiguous();
  auto [it, added] = set_ids_.emplace(stacks, static_cast<int32_t>(sets_.size()));
  if (added) sets_.push_back(stacks);
  return it->second;
}

// Expands the stack whose top frame is `top` until every top is a terminal (appended to out).
// Reaching the bottom: in a local walk the stack left the hidden context's frame (`bottom`); in
// a full walk the text is complete there and takes no more bytes.
void TrieWalker::expand(int32_t top, std::vector<int32_t>& out, bool& bottom) {
  work_.clear();
  work_.push_back(top);
  while (!work_.empty()) {
    if (budget_ == 0) too_costly();
    --budget_;
    const int32_t n = work_.back();
    work_.pop_back();
    if (n < 0) {
      bottom = true;
      continue;
    }
    const Frame f = frames_[static_cast<size_t>(n)];
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

const TrieWalker::Step& TrieWalker::step(int32_t set, uint8_t byte) {
  const uint64_t key = (static_cast<uint64_t>(set) << 8) | byte;
  if (auto it = steps_.find(key); it != steps_.end()) return it->second;
  Step s;
  std::vector<int32_t> next;
  for (int32_t top : sets_[static_cast<size_t>(set)]) {
    const Frame f = frames_[static_cast<size_t>(top)];
    if (!g_.takes(f.pos, byte)) continue;
    s.took = true;
    expand(frame(f.pos + 1, f.parent), next, s.bottom);
  }
  if (!next.empty()) s.next = intern(next);
  return steps_.emplace(key, s).first->second;
}

bool TrieWalker::meets_only(uint32_t begin, uint32_t end) const {
  auto it =
      std::upper_bound(only_.begin(), only_.end(), begin, [](uint32_t v, const RankInterval& r) { return v < r.end; });
  return it != only_.end() && it->begin < end;
}

// The children of trie node `node`, reached with the stacks of `set`. `escaped`: some stack left
// the hidden context's frame on the way here (local walks), so what no stack takes below is
// uncertain, not refused.
void TrieWalker::visit(uint32_t node, int32_t set, bool escaped) {
  const std::vector<VocabTrie::Node>& nodes = trie_.nodes();
  for (uint32_t c = node + 1; c < nodes[node].skip; c = nodes[c].skip) {
    const VocabTrie::Node& child = nodes[c];
    if (!local_ && !meets_only(child.tok_begin, child.sub_end)) continue;
    const Step s = step(set, child.byte);
    const bool esc = escaped || (local_ && s.bottom);
    if (s.took) {
      add_interval(allowed_, child.tok_begin, child.tok_end);
      if (s.next >= 0) {
        visit(c, s.next, esc);
      } else if (esc) {
        add_interval(uncertain_, child.tok_end, child.sub_end);
      }
    } else if (escaped) {
      add_interval(uncertain_, child.tok_begin, child.sub_end);
    }
  }
}

void TrieWalker::walk_top(std::span<const uint32_t> top, std::vector<RankInterval>& allowed,
                          std::vector<RankInterval>& uncertain) {
  allowed_ = &allowed;
  uncertain_ = &uncertain;
  reset(true, {});
  int32_t below = -1;
  for (uint32_t pos : top) below = frame(pos, below);
  std::vector<int32_t> start = {below};
  visit(0, intern(start), false);
}

void TrieWalker::walk_stacks(std::span<const ParseStack> stacks, std::span<const RankInterval> only,
                             std::vector<RankInterval>& allowed) {
  allowed_ = &allowed;
  uncertain_ = nullptr;
  reset(false, only);
  std::vector<int32_t> start;
  for (const ParseStack& s : stacks) {
    if (s.empty()) continue;
    int32_t below = -1;
    for (uint32_t pos : s) below = frame(pos, below);
    start.push_back(below);
  }
  if (!start.empty()) visit(0, intern(start), false);
}

}  // namespace peregrine
