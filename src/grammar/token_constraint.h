#pragma once
// Which tokens may come next under a grammar: the token mask of constrained decoding.
//
// A token is allowed when its bytes, fed to the matcher, keep the text a valid prefix. Checking
// 150k tokens one by one at every step would be far too slow, so:
//   * the vocabulary is a trie (vocab_trie.h): a walk advances the parse stacks once per trie
//     node, and a subtree no stack can enter is skipped whole;
//   * most of a mask depends only on the top of a stack, not on what lies below it: walking from
//     a lone terminal position p (its rule's continuation hidden), a token that is consumed
//     without leaving that rule is allowed whatever the context, one that dies is refused
//     whatever the context, and only tokens that run past the end of the rule are uncertain.
//     These per-position answers are computed once per grammar and cached (the rank intervals of
//     PositionMasks); at each step the allowed tokens of every stack are the cached ones plus
//     whichever uncertain ones a walk with the full stack accepts (inside a JSON string: every
//     token without a quote or backslash is decided by the cache, and only tokens that close the
//     string need the full stack).
// The result is exact (tests compare it with checking every token on its own).
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
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

// What the walk from a lone terminal position decides: tokens allowed whatever lies below it, and
// tokens that depend on it (every other token is refused). Rank intervals, ascending.
struct PositionMasks {
  std::vector<RankInterval> allowed;
  std::vector<RankInterval> uncertain;
};

// A grammar against one vocabulary, with the per-position cache. Shared by every sequence that
// uses the grammar; its methods lock, so any thread may call them.
class TrieWalker;

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie);
  ~TokenConstraint();
  TokenConstraint(const TokenConstraint&) = delete;
  TokenConstraint& operator=(const TokenConstraint&) = delete;

  GrammarMatcher start() const { return GrammarMatcher(grammar_); }
  const VocabTrie& trie() const { return *trie_; }

  // The tokens (with bytes) allowed after `m`. drop_leading_space: the token's bytes lose one
  // leading space first (the first token of a SentencePiece text, as the detokenizer does).
  // Throws GrammarError when the grammar is too ambiguous to walk within bounds.
  void allowed(const GrammarMatcher& m, TokenSet& out, bool drop_leading_space = false);
  // Sets every token that is not allowed to -inf (control tokens included: the caller decides
  // about end-of-generation tokens). logits: [n_vocab].
  void mask_logits(const GrammarMatcher& m, std::span<float> logits, bool drop_leading_space = false);
  // Feeds the token's bytes to `m`; false (m unchanged) if the grammar refuses them.
  bool accept_token(GrammarMatcher& m, int32_t id, bool drop_leading_space = false) const;

  // The per-position answer (computed on first use); for tests and measurements.
  PositionMasks position_masks(uint32_t pos);
  size_t cached_positions() const;

 private:
  const PositionMasks& masks_for(uint32_t pos);
  void allowed_ranks(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits);
  void fix_leading_space(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> trie_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, PositionMasks> cache_;
  size_t cached_intervals_ = 0;
  std::unique_ptr<TrieWalker> walker_;
  std::vector<uint64_t> rank_bits_;  // scratch: allowed tokens by rank
};

}  // namespace peregrine
