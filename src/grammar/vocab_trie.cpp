#include "grammar/vocab_trie.h"

#include <algorithm>

namespace peregrine {

VocabTrie::VocabTrie(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id) {
    (bytes_[static_cast<size_t>(id)].empty() ? empty_ : by_rank_).push_back(id);
  }
  std::stable_sort(by_rank_.begin(), by_rank_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  build(0, n_ranked(), 0, 0);
}

// Adds the node for the tokens of ranks [lo, hi), which share their first `depth` bytes, and its
// subtree; returns its index.
uint32_t VocabTrie::build(uint32_t lo, uint32_t hi, size_t depth, uint8_t byte) {
  max_depth_ = std::max(max_depth_, depth);
  const auto index = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({});
  uint32_t ends = lo;  // sorted: the tokens that end here come first
  while (ends < hi && bytes(by_rank_[ends]).size() == depth) ++ends;
  uint32_t child = ends;
  while (child < hi) {
    const auto b = static_cast<uint8_t>(bytes(by_rank_[child])[depth]);
    uint32_t last = child;
    while (last < hi && static_cast<uint8_t>(bytes(by_rank_[last])[depth]) == b) ++last;
    build(child, last, depth + 1, b);
    child = last;
  }
  Node& n = nodes_[index];
  n.byte = byte;
  n.tok_begin = lo;
  n.tok_end = ends;
  n.sub_end = hi;
  n.skip = static_cast<uint32_t>(nodes_.size());
  return index;
}

RankInterval VocabTrie::starting_with(uint8_t b) const {
  for (uint32_t c = 1; c < nodes_[0].skip; c = nodes_[c].skip) {
    if (nodes_[c].byte == b) return {nodes_[c].tok_begin, nodes_[c].sub_end};
  }
  return {0, 0};
}

}  // namespace peregrine
