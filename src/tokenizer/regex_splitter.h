#pragma once
// Pre-tokenization for byte-level BPE: split text with a sequence of PCRE2 regexes the way
// llama.cpp's unicode_regex_split does. Each regex in turn splits every current piece into its
// matches and the unmatched gaps between them (gaps are kept as pieces of their own), and a
// regex only sees the piece it splits (lookaheads stop at the piece's end).
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::tokenizer {

class RegexSplitter {
 public:
  // Compiles (and JIT-compiles) the patterns once, with UTF + UCP so \p{L}, \s, ... are Unicode
  // aware; invalid UTF-8 in the subject never matches and so ends up in gaps. Throws
  // std::invalid_argument naming the pattern if one does not compile.
  explicit RegexSplitter(std::span<const std::string> patterns);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Pieces of `text`, in order, covering it exactly. Thread-safe (per-call match state).
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace peregrine::tokenizer
