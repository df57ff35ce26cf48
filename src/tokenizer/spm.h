#pragma once
// SentencePiece-style BPE (llama.cpp's llm_tokenizer_spm): greedy merging of the adjacent pair
// whose merged piece has the highest score, with byte fallback for pieces not in the vocabulary.
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace peregrine::tokenizer {

// Appends the ids for `text`, which must already have its spaces escaped to U+2581 (and the
// space prefix added when the model wants one).
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<Id>& out);

// The id of byte token <0xNN> (or of the one-byte piece itself), -1 if the vocabulary has neither.
Id spm_byte_token(const Vocab& vocab, unsigned char byte);

}  // namespace peregrine::tokenizer
