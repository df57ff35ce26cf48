#pragma once
// Walks the vocabulary trie with a set of parse stacks, advancing them one byte per trie edge and
// skipping every subtree no stack can enter (token_constraint.h explains how it is used).
// Stacks are frames in an arena, each pointing to the frame below it, so the stacks of a walk
// share their lower parts and advancing a stack creates only the frames that change; the arena
// is cut back as the walk returns from a subtree.
#include <cstdint>
#include <span>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab_trie.h"

namespace peregrine {

class TrieWalker {
 public:
  TrieWalker(const Grammar& grammar, const VocabTrie& trie);

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

  int32_t frame(uint32_t pos, int32_t parent);
  void expand(int32_t top, std::vector<int32_t>& out, bool& escaped);
  void dedup(std::vector<int32_t>& stacks) const;
  bool meets_only(uint32_t begin, uint32_t end) const;
  void visit(uint32_t node, size_t depth, bool escaped);
  void run(bool local, std::span<const RankInterval> only);

  const Grammar& g_;
  const VocabTrie& trie_;
  bool local_ = false;
  std::span<const RankInterval> only_;
  std::vector<Frame> arena_;
  std::vector<std::vector<int32_t>> levels_;  // [trie depth + 2]: the stacks at each depth of the walk
  std::vector<int32_t> work_;                 // scratch for expand
  std::vector<RankInterval>* allowed_ = nullptr;
  std::vector<RankInterval>* uncertain_ = nullptr;
};

}  // namespace peregrine
