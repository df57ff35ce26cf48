#pragma once
// The SentencePiece-style vocabulary of synthetic models.
#include <cstdint>
#include <string>
#include <vector>

#include "format/metadata.h"

namespace peregrine::synth {

// llama.cpp token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct SyntheticVocab {
  std::vector<std::string> tokens;   // [n_vocab], all distinct
  std::vector<float> scores;         // [n_vocab]
  std::vector<int32_t> types;        // [n_vocab] TokenType values
};

inline constexpr int32_t kUnkId = 0;
inline constexpr int32_t kBosId = 1;
inline constexpr int32_t kEosId = 2;
inline constexpr int64_t kFirstPieceId = 3 + 256;  // after <unk>, <s>, </s> and <0x00>..<0xFF>

// Ids 0..2: <unk> (unknown), <s>, </s> (control); 3..258: <0x00>..<0xFF> (byte); then normal
// pieces: "▁", single characters, common "▁word"s, then generated letter strings (with and
// without "▁") until n_vocab. Needs n_vocab > kFirstPieceId (checked by the caller).
SyntheticVocab make_synthetic_vocab(int64_t n_vocab);

// tokenizer.ggml.* keys for a vocab made by make_synthetic_vocab.
void add_synthetic_vocab_metadata(Metadata& meta, int64_t n_vocab);

}  // namespace peregrine::synth
