#include "engine/ngram_proposer.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace peregrine {

NgramProposer::NgramProposer(int64_t min_n, int64_t max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n || max_n > 16) {
    throw UsageError("n-gram proposer: n-gram lengths [" + std::to_string(min_n) + ", " + std::to_string(max_n) +
                     "] must satisfy 1 <= min <= max <= 16");
  }
}

std::vector<TokenId> ngram_lookup(std::span<const TokenId> tokens, int64_t min_n, int64_t max_n, int64_t max_tokens) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min(max_n, len - 1); n >= min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // The most recent earlier start j whose n tokens equal the suffix (j + n <= len - 1, so at
    // least one token follows it).
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      const int64_t from = j + n, to = std::min(len, from + max_tokens);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

void NgramProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    s.draft = ngram_lookup(s.tokens, min_n_, max_n_, max_tokens[i]);
    s.draft_q.clear();
    for (TokenId t : s.draft) s.draft_q.push_back(TokenDistribution::one_hot(t));
  }
}

}  // namespace peregrine
