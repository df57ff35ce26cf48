#pragma once
// Byte-level BPE (GPT-2 style, llama.cpp's llm_tokenizer_bpe): text is pre-tokenized by regex,
// each piece's bytes are mapped to printable code points (bytes_to_unicode), and adjacent
// symbols are merged lowest merge rank first.
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "format/metadata.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/vocab.h"

namespace peregrine::tokenizer {

// GPT-2's bytes_to_unicode: every byte becomes one printable code point, UTF-8 encoded.
std::string byte_level_encode(std::string_view raw);
// The inverse; code points outside the mapping are copied through unchanged.
std::string byte_level_decode(std::string_view encoded);

// How llama.cpp pre-tokenizes for one tokenizer.ggml.pre value.
struct PreTokenizerSpec {
  std::vector<std::string> regexes;  // applied in sequence
  bool ignore_merges = false;        // a piece that is a token is emitted whole (llama3)
  bool add_bos = false;              // default for tokenizer.ggml.add_bos_token
};
// nullptr if `name` is not supported.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view name);
// "default, gpt-2, llama-bpe, ..." for error messages.
std::string supported_pre_tokenizers();

class BpeModel {
 public:
  // `merges` is tokenizer.ggml.merges ("left right" strings; index = rank).
  BpeModel(const Vocab& vocab, const MetaArray& merges, const PreTokenizerSpec& spec);

  // Appends the ids for a fragment of plain text (no special tokens in it).
  void encode(const Vocab& vocab, std::string_view text, std::vector<Id>& out) const;

 private:
  void encode_word(const Vocab& vocab, std::string_view word, std::vector<Id>& out) const;
  int rank(const Vocab& vocab, std::string_view left, std::string_view right, std::string& scratch) const;

  // Merges whose two halves are tokens (all of them in real vocabularies) are keyed by the pair
  // of ids, which loads and probes without building strings; any others by "left right".
  std::unordered_map<uint64_t, int> id_ranks_;
  StringMap<int> string_ranks_;
  RegexSplitter splitter_;
  bool ignore_merges_;
};

}  // namespace peregrine::tokenizer
