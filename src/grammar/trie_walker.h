#pragma once
// Walks the vocabulary trie with a set of parse stacks, advancing them one byte per trie edge and
// skipping every subtree no stack can enter (token_constraint.h explains how it is used).
//
// Within one walk, stacks are frames (a position and the frame below it) interned by value, so
// equal stacks are the same frame and stack sets can be interned too; each (set of stacks, byte)
// is then advanced once and its result remembered. Inside a JSON string the stacks after any
// plain character are the very same set as before it, so most of the trie is walked by lookups.
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab_trie.h"

namespace peregrine {

class TrieWalker {
 public:
  TrieWalker(const Grammar& grammar, const VocabTrie& trie);

  // The expansion steps the walks from now on may take together (kMaxMaskSteps for one mask);
  // past them a walk throws GrammarError.
  void set_budget(size_t steps) { budget_ = steps; }

  // From the top frames of a stack (`top`, bottom first; what lies below them hidden): `allowed`
  // gets the tokens some stack consumes without popping the lowest of these frames, `uncertain`
  // the others that some stack could only take after popping it. Rank intervals, ascending.
  void walk_top(std::span<const uint32_t> top, std::vector<RankInterval>& allowed,
                std::vector<RankInterval>& uncertain);
  // From whole stacks: `allowed` gets the tokens they accept, looking only into trie subtrees
  // that hold a token of `only` (ascending intervals).
  void walk_stacks(std::span<const ParseStack> stacks, std::span<const RankInterval> only,
                   std::vector<RankInterval>& allowed);

 private:
  struct Frame {
    uint32_t pos;
    int32_t parent;  // -1: the bottom (local walk: the hidden context; full walk: nothing)
  };
  // One byte's effect on an interned set of stacks.
  struct Step {
    int32_t next = -1;    // the interned set after it; -1: none left
    bool took = false;    // some stack took the byte
    bool bottom = false;  // some stack popped its bottom frame on the way (a local walk's escape)
  };

  void reset(bool local, std::span<const RankInterval> only);
  int32_t frame(uint32_t pos, int32_t parent);
  int32_t intern(std::vector<int32_t>& stacks);
  void expand(int32_t top, std::vector<int32_t>& out, bool& bottom);
  const Step& step(int32_t set, uint8_t byte);
  bool meets_only(uint32_t begin, uint32_t end) const;
  void visit(uint32_t node, int32_t set, bool escaped);

  const Grammar& g_;
  const VocabTrie& trie_;
  bool local_ = false;
  std::span<const RankInterval> only_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;  // (pos, parent) -> frame
  std::vector<std::vector<int32_t>> sets_;           // interned sets of stacks (sorted top frames)
  std::map<std::vector<int32_t>, int32_t> set_ids_;
  std::unordered_map<uint64_t, Step> steps_;  // (set, byte) -> its step
  std::vector<int32_t> work_;                 // scratch for expand
  size_t budget_ = kMaxMaskSteps;
  std::vector<RankInterval>* allowed_ = nullptr;
  std::vector<RankInterval>* uncertain_ = nullptr;
};

}  // namespace peregrine
