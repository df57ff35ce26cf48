#pragma once
// Which tokens may come next under a grammar: the token mask of constrained decoding.
//
// A token is allowed when its bytes, fed to the matcher, keep the text a valid prefix. Checking
// 150k tokens one by one at every step would be far too slow, so:
//   * the vocabulary is a trie (vocab_trie.h): a walk advances the parse stacks once per trie
//     node, and a subtree no stack can enter is skipped whole;
//   * most of a mask depends only on the top frames of a stack, not on what lies below them:
//     walking from the top kTopFrames frames alone, a token consumed without popping the lowest
//     of them is allowed whatever lies below, one that dies is refused whatever lies below, and
//     only tokens that pop it are uncertain. These answers (TopMasks) are computed once per
//     grammar and top and cached; a step's allowed tokens are, per stack, the cached ones plus
//     whichever uncertain ones a walk with the whole stack accepts. Inside a JSON string, the top
//     frames hold the character loop, so every token without a quote or backslash is decided by
//     the cache and only tokens that close the string need the whole stack;
//   * the whole answer is cached too, per set of stacks (kStateCacheEntries of them), since a
//     state recurs at every step inside a string and across the sequences of a request.
// The result is exact (tests compare it with checking every token on its own).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab_trie.h"

namespace peregrine {

// A set of token ids (bits by id).
class TokenSet {
 public:
  explicit TokenSet(int32_t n_vocab = 0) : bits_((static_cast<size_t>(n_vocab) + 63) / 64, 0), n_(n_vocab) {}
  bool contains(int32_t id) const { return (bits_[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
  void add(int32_t id) { bits_[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  void clear() { std::fill(bits_.begin(), bits_.end(), 0); }
  size_t count() const;
  int32_t n_vocab() const { return n_; }

 private:
  std::vector<uint64_t> bits_;
  int32_t n_ = 0;
};

inline constexpr size_t kTopFrames = 3;
inline constexpr size_t kStateCacheEntries = 64;

// What the walk from the top frames of a stack decides: tokens allowed whatever lies below them,
// and tokens that depend on it (every other token is refused). Rank intervals, ascending.
struct TopMasks {
  std::vector<RankInterval> allowed;
  std::vector<RankInterval> uncertain;
};

// A grammar against one vocabulary, with the per-position cache. Shared by every sequence that
// uses the grammar; its methods lock, so any thread may call them.
class TrieWalker;

class TokenConstraint {
 public:
  // Builds the grammar's start state here, once (GrammarMatcher's limits: GrammarError when it is
  // too ambiguous or too costly to start), so a request's start is a copy.
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie);
  ~TokenConstraint();
  TokenConstraint(const TokenConstraint&) = delete;
  TokenConstraint& operator=(const TokenConstraint&) = delete;

  const GrammarMatcher& start() const { return start_; }
  const VocabTrie& trie() const { return *trie_; }

  // The tokens (with bytes) allowed after `m`. drop_leading_space: the token's bytes lose one
  // leading space first (the first token of a SentencePiece text, as the detokenizer does).
  // Throws GrammarError when the grammar is too ambiguous to walk within bounds (kMaxParseStacks,
  // kMaxMaskSteps).
  void allowed(const GrammarMatcher& m, TokenSet& out, bool drop_leading_space = false);
  // Sets every token that is not allowed to -inf (control tokens included: the caller decides
  // about end-of-generation tokens) and returns how many are allowed. logits: [n_vocab].
  size_t mask_logits(const GrammarMatcher& m, std::span<float> logits, bool drop_leading_space = false);
  // Feeds the token's bytes to `m`; false (m unchanged) if the grammar refuses them.
  bool accept_token(GrammarMatcher& m, int32_t id, bool drop_leading_space = false) const;

  // Cache sizes, for tests and measurements.
  size_t cached_tops() const;
  size_t cached_states() const;

 private:
  const TopMasks& masks_for(const ParseStack& stack);
  const std::vector<uint64_t>& state_ranks(const GrammarMatcher& m);
  void allowed_ranks(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits);
  void fix_leading_space(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> trie_;
  GrammarMatcher start_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, TopMasks> tops_;  // by the top frames' positions
  size_t cached_intervals_ = 0;
  std::unordered_map<std::string, std::vector<uint64_t>> states_;  // by the stacks: allowed ranks
  std::vector<std::string> state_order_;                           // oldest first, for eviction
  std::unique_ptr<TrieWalker> walker_;
  std::vector<uint64_t> rank_bits_;  // scratch: allowed tokens by rank
};

}  // namespace peregrine
