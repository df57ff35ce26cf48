#pragma once
// One call's worth of work for the model: a flat list of tokens, each with its position and the
// sequence it belongs to. Prompt chunks of several sequences and single decode tokens mix freely
// (continuous batching); within one sequence, tokens appear in increasing position order.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace peregrine {

using SeqId = int32_t;
using TokenId = int32_t;

struct Batch {
  std::vector<TokenId> tokens;     // [n]
  std::vector<int32_t> positions;  // [n] position of each token in its sequence (0-based)
  std::vector<SeqId> seq_ids;      // [n] sequence of each token
  std::vector<uint8_t> want_logits;// [n] 1 = return logits for this row

  void add(TokenId token, int32_t pos, SeqId seq, bool logits) {
    tokens.push_back(token);
    positions.push_back(pos);
    seq_ids.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
  void clear() { tokens.clear(); positions.clear(); seq_ids.clear(); want_logits.clear(); }
};

}  // namespace peregrine
