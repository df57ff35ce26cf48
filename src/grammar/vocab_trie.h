#pragma once
// The vocabulary as a trie over the bytes each token puts in the output, so that a grammar walk
// checks a prefix shared by many tokens once. Tokens are ranked by their bytes (ties by id); the
// tokens under a trie node then have consecutive ranks, so a whole subtree is one rank interval.
// Tokens that put no bytes in the output (control tokens such as BOS and EOS) are not in the trie.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace peregrine {

struct RankInterval {
  uint32_t begin = 0;
  uint32_t end = 0;  // exclusive
};

class VocabTrie {
 public:
  // Nodes in depth-first order; node 0 is the root (the empty prefix). The children of node n
  // are n + 1, then each next child at the previous one's `skip`, while below n's skip.
  struct Node {
    uint32_t skip = 0;       // the first node after this one's subtree
    uint32_t tok_begin = 0;  // ranks of the tokens whose bytes end exactly here: [tok_begin, tok_end)
    uint32_t tok_end = 0;
    uint32_t sub_end = 0;  // ranks of every token in the subtree: [tok_begin, sub_end)
    uint8_t byte = 0;      // the byte leading here from the parent
  };

  // token_bytes[id]: the bytes token `id` adds to the output ("" for control tokens).
  explicit VocabTrie(std::vector<std::string> token_bytes);

  int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
  uint32_t n_ranked() const { return static_cast<uint32_t>(by_rank_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }
  size_t max_depth() const { return max_depth_; }
  int32_t id_at(uint32_t rank) const { return by_rank_[rank]; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Tokens with no bytes (never allowed by a grammar mask).
  std::span<const int32_t> empty_tokens() const { return empty_; }
  // The ranks of the tokens whose bytes start with byte b (a subtree of the root).
  RankInterval starting_with(uint8_t b) const;

 private:
  uint32_t build(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte);

  std::vector<std::string> bytes_;  // [n_vocab]
  std::vector<int32_t> by_rank_;    // ids of tokens with bytes, sorted by (bytes, id)
  std::vector<int32_t> empty_;
  std::vector<Node> nodes_;
  size_t max_depth_ = 0;
};

}  // namespace peregrine
