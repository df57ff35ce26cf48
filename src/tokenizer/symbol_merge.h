#pragma once
// The merge loop SentencePiece (by score) and byte-level BPE (by rank) share: the text is a
// doubly linked list of symbols, candidate adjacent pairs wait in a priority queue ordered by the
// tokenizer's rule, and the best pair is merged until none is left. Only the ordering and what
// makes a pair a candidate differ, so those stay with each tokenizer.
#include <cstddef>
#include <vector>

namespace peregrine::tokenizer {

struct Symbol {
  int prev;       // index of the left neighbour, -1 at the start
  int next;       // index of the right neighbour, -1 at the end
  size_t offset;  // into the text
  size_t size;    // bytes; 0 once merged into its left neighbour
};

// Pops pairs from `queue` (a priority queue of bigrams with members left, right and size = the
// merged piece's bytes when queued) and merges them, calling add_bigram(left, right) for the new
// neighbours of each merged symbol. Stale entries (a side already merged away or grown) are
// skipped: symbols are contiguous, so an unchanged total size means an unchanged pair.
template <typename Queue, typename AddBigram>
void merge_best_pairs(std::vector<Symbol>& symbols, Queue& queue, AddBigram&& add_bigram) {
  while (!queue.empty()) {
    const auto b = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(b.left)];
    Symbol& right = symbols[static_cast<size_t>(b.right)];
    if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = b.left;
    add_bigram(left.prev, b.left);
    add_bigram(b.left, left.next);
  }
}

}  // namespace peregrine::tokenizer
