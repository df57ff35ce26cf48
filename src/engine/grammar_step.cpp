#include "engine/grammar_step.h"

#include <algorithm>

namespace peregrine {
namespace {

bool is_end(std::span<const TokenId> end_tokens, TokenId t) {
  return std::find(end_tokens.begin(), end_tokens.end(), t) != end_tokens.end();
}

// The first generated token of a SentencePiece text loses a leading space, as the detokenizer
// drops it: `generated` tokens already precede this one.
bool strips_space(const Sequence& s, int64_t generated) { return s.grammar_strips_space && generated == 0; }

}  // namespace

std::shared_ptr<const VocabTrie> make_vocab_trie(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.n_vocab()));
  for (TokenId t = 0; t < tokenizer.n_vocab(); ++t) bytes[static_cast<size_t>(t)] = tokenizer.token_to_bytes(t);
  return std::make_shared<const VocabTrie>(std::move(bytes));
}

std::vector<TokenId> grammar_end_tokens(const Sequence& s, std::span<const TokenId> end_of_generation) {
  std::vector<TokenId> out(s.request.stop_token_ids.begin(), s.request.stop_token_ids.end());
  if (!s.request.ignore_eos) out.insert(out.end(), end_of_generation.begin(), end_of_generation.end());
  return out;
}

void cut_draft_to_grammar(Sequence& s, std::span<const TokenId> end_tokens) {
  GrammarMatcher state = *s.grammar;
  TokenConstraint& c = *s.request.grammar;
  size_t keep = 0;
  for (; keep < s.draft.size(); ++keep) {
    const TokenId t = s.draft[keep];
    if (is_end(end_tokens, t)) {
      keep += state.is_accepting() ? 1 : 0;  // the request would end with it: nothing after
      break;
    }
    if (!c.accept_token(state, t, strips_space(s, s.n_generated() + static_cast<int64_t>(keep)))) break;
    if (state.is_accepting() && !state.can_continue()) break;  // it ends the text: no row after it to sample
  }
  s.draft.resize(keep);
  s.draft_q.resize(keep);
}

MaskedRows mask_grammar_rows(const Sequence& s, std::span<const float> logits, std::span<float> rows, int64_t n_vocab,
                             std::span<const TokenId> end_tokens) {
  const auto v = static_cast<size_t>(n_vocab);
  const auto n = static_cast<int64_t>(logits.size() / v);
  std::copy(logits.begin(), logits.end(), rows.begin());
  GrammarMatcher state = *s.grammar;
  TokenConstraint& c = *s.request.grammar;
  MaskedRows out;
  for (int64_t i = 0; i < n; ++i) {
    const std::span<float> row = rows.subspan(static_cast<size_t>(i) * v, v);
    size_t allowed = c.mask_logits(state, row, strips_space(s, s.n_generated() + i));
    if (state.is_accepting()) {
      for (TokenId t : end_tokens) {
        if (t < 0 || t >= n_vocab) continue;
        row[static_cast<size_t>(t)] = logits[static_cast<size_t>(i) * v + static_cast<size_t>(t)];
        ++allowed;
      }
    }
    if (allowed == 0) {
      out.first_empty = i == 0;
      out.rows = std::max<int64_t>(i, 1);
      return out;
    }
    out.rows = i + 1;
    if (i + 1 == n) break;
    const TokenId t = s.draft[static_cast<size_t>(i)];
    if (is_end(end_tokens, t) || !c.accept_token(state, t, strips_space(s, s.n_generated() + i))) break;
  }
  return out;
}

bool commit_grammar_token(Sequence& s, TokenId t, std::span<const TokenId> end_tokens) {
  if (is_end(end_tokens, t)) return s.grammar->is_accepting();
  if (!s.request.grammar->accept_token(*s.grammar, t, strips_space(s, s.n_generated() - 1))) return false;
  s.grammar_done = s.grammar->is_accepting() && !s.grammar->can_continue();
  return true;
}

}  // namespace peregrine
