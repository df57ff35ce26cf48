#pragma once
// Text <-> token ids for the models peregrine runs, reproducing llama.cpp's tokenizers exactly:
//   "llama" (SentencePiece-style BPE with scores and byte fallback; Llama 1/2, Phi-3, llama2.c)
//   "gpt2"  (byte-level BPE with merges and a regex pre-tokenizer; Llama 3, Qwen2, GPT-2)
// Built from GGUF tokenizer.ggml.* metadata (llama2.c tokenizer.bin files are converted to the
// same metadata by the format module).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/metadata.h"

namespace peregrine {

using TokenId = int32_t;  // same type as util/batch.h

namespace tokenizer {
struct TokenizerImpl;
}

// Bytes [offset, offset + length) of a text.
struct TextSpan {
  size_t offset = 0;
  size_t length = 0;
};

class Tokenizer {
 public:
  // Throws FormatError("<source>: ...") on missing/inconsistent vocabulary metadata or an
  // unsupported tokenizer.ggml.model / .pre (the message lists the supported ones).
  static Tokenizer from_metadata(const Metadata& meta, const std::string& source);

  // add_special: add BOS (and EOS) as the model's add_bos/add_eos say.
  // parse_special: text such as "<|eot_id|>" or "<s>" becomes that control token; otherwise it is
  // tokenized as plain text. User-defined tokens are always matched (as llama.cpp does).
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // encode(text, add_special, parse_special = true), except that a control or unknown token whose
  // text overlaps one of the `literal` spans is not matched there: those bytes stay plain text.
  // (The chat endpoint uses it so that special-token text inside message content cannot become
  // a special token, while the template's own text still can.)
  std::vector<TokenId> encode_with_literals(std::string_view text, bool add_special,
                                            std::span<const TextSpan> literal) const;

  // Where encode(text, _, parse_special = true) would match control or unknown tokens (their text
  // only, without whitespace an lstrip/rstrip token swallows), in text order.
  std::vector<TextSpan> find_special_text(std::string_view text) const;

  // The bytes one token contributes to the output (SPM: "▁" -> " ", "<0x0A>" -> "\n"; BPE: the
  // byte-level mapping undone). Control/unknown tokens give "" unless render_special. May be an
  // incomplete UTF-8 sequence (byte tokens). Ids out of range give "".
  std::string token_to_bytes(TokenId id, bool render_special = false) const;

  // Concatenated token bytes, with llama.cpp's rule that when the model adds a space prefix the
  // first token loses one leading space. No space clean-up is applied (llama.cpp's
  // clean_spaces), so decode(encode(x)) == x for any text the vocabulary can spell.
  std::string decode(std::span<const TokenId> ids, bool render_special = false) const;

  const std::string& piece(TokenId id) const;  // raw vocabulary string; throws std::out_of_range
  int32_t n_vocab() const;
  // No token stands for more input bytes than this, except whitespace an lstrip/rstrip special
  // token swallows: the longest vocabulary string (SPM "▁" is 3 bytes for 1 space, byte-level BPE
  // 1-2 per byte, byte tokens 6 for 1), times 3 when the vocabulary NFC-normalizes its input.
  // Bounds a prompt's bytes by its tokens.
  size_t max_piece_bytes() const;
  TokenId bos() const;  // -1 if none
  TokenId eos() const;  // -1 if none
  TokenId eot() const;  // -1 if none
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  bool is_end_of_generation(TokenId id) const;  // EOS, EOT, EOM and end-of-turn-like tokens
  bool is_control(TokenId id) const;
  std::string_view model_kind() const;     // "llama" (SPM) | "gpt2" (byte-level BPE)
  std::string_view pre_tokenizer() const;  // e.g. "llama-bpe", "qwen2", "gpt-2", "default"

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer::TokenizerImpl> impl);
  std::vector<TokenId> encode_fragments(std::string_view text, bool add_special, bool parse_special,
                                        std::span<const TextSpan> literal) const;
  std::shared_ptr<const tokenizer::TokenizerImpl> impl_;  // immutable, so copies share it safely
};

// Streaming detokenizer: feed generated ids one at a time; push() returns only complete UTF-8
// text, holding back an incomplete multi-byte sequence until it completes (never half a
// character; bytes that can never form a character come out as U+FFFD). flush() returns what is
// left, incomplete bytes replaced by U+FFFD. For valid output the pieces concatenate to decode().
class StreamDecoder {
 public:
  // at_text_start: the first id pushed starts the text, so the SPM space-prefix rule applies to
  // it exactly as in decode(). Pass false when continuing after a prompt that was not pushed.
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false, bool at_text_start = true);
  std::string push(TokenId id);
  std::string flush();

 private:
  Tokenizer tok_;  // shares the immutable vocabulary
  bool render_special_;
  bool first_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace peregrine
