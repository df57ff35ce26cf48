#pragma once
// Constrained decoding inside the engine step (Request::grammar): drafts cut to what the grammar
// allows, the logits rows of a step masked to the tokens that keep the text a valid prefix, and
// the grammar state advanced by each committed token.
//
// End tokens (end-of-generation tokens unless ignore_eos, and the request's stop token ids) put no
// bytes in the text: they are allowed exactly when the text is complete. Masks are a function of
// the grammar state alone, so the tokens stay the same whatever shares the batch.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "grammar/vocab_trie.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

// The vocabulary trie of a tokenizer: each token's output bytes (none for control tokens), what
// a TokenConstraint for this model's requests is built on.
std::shared_ptr<const VocabTrie> make_vocab_trie(const Tokenizer& tokenizer);

// The tokens that end a constrained request once its text is complete.
std::vector<TokenId> grammar_end_tokens(const Sequence& s, std::span<const TokenId> end_of_generation);

// Cuts s.draft (and s.draft_q) at the first token the grammar refuses, and after the first one
// that completes the text for good (nothing could follow it, so no row after it can be sampled).
void cut_draft_to_grammar(Sequence& s, std::span<const TokenId> end_tokens);

struct MaskedRows {
  int64_t rows = 0;          // leading rows usable for sampling and verification (>= 1)
  bool first_empty = false;  // row 0 allows no token at all
};

// rows: [n][n_vocab], a copy of the step's logits for s; row i, the prediction after the committed
// tokens and draft[0, i), is masked to what the grammar allows there. A row that allows nothing
// cuts the rows at it (its draft token cannot have been right); a draft token the grammar refuses
// cuts after its own row (where masking makes its rejection certain).
MaskedRows mask_grammar_rows(const Sequence& s, std::span<const float> logits, std::span<float> rows, int64_t n_vocab,
                             std::span<const TokenId> end_tokens);

// Advances s.grammar by the committed token `t` (the last of s.tokens) and sets s.grammar_done
// when the text is complete and nothing may follow. False when the grammar refuses `t`.
bool commit_grammar_token(Sequence& s, TokenId t, std::span<const TokenId> end_tokens);

}  // namespace peregrine
