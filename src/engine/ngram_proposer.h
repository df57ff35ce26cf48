#pragma once
// Prompt-lookup speculation: no second model. The last n tokens of a sequence are searched for
// earlier in the same sequence (prompt and output); the tokens that followed the most recent
// earlier occurrence are proposed. Longer matches are tried first (n from max_n down to min_n).
// Text that repeats itself (code, quoted context, lists, and small models' loops) is guessed
// almost for free. Proposals are deterministic (one-hot q).
#include <cstdint>

#include "engine/proposer.h"

namespace peregrine {

class NgramProposer final : public Proposer {
 public:
  // 1 <= min_n <= max_n <= 16 (UsageError otherwise).
  explicit NgramProposer(int64_t min_n = 1, int64_t max_n = 4);

  std::string_view name() const override { return "ngram"; }
  void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) override;

 private:
  int64_t min_n_, max_n_;
};

// The proposal for one token sequence: up to max_tokens tokens following the most recent earlier
// occurrence of its longest suffix of length in [min_n, max_n] that occurs earlier. tokens: [n]
std::vector<TokenId> ngram_lookup(std::span<const TokenId> tokens, int64_t min_n, int64_t max_n, int64_t max_tokens);

}  // namespace peregrine
