// The priority-queue merge loops against plain quadratic reference implementations, on random
// text (mixed scripts, digits, punctuation, whitespace; ragged lengths) and the real vocabularies.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/bpe.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixtures.h"

namespace peregrine {
namespace {

std::string random_text(std::mt19937& rng, size_t max_chars) {
  static const std::vector<std::string> alphabet = {
      "a", "b", "e", "n", "s", "t", "T", "H", "x", "'", "s", "l", " ", " ", " ", "\n", "\t", "0",
      "3", "7", ".", ",", "!", "?", "-", "(", "\"", "\xC3\xA4", "\xC3\xA9", "\xD0\xBD", "\xE6\x88\x91",
      "\xE5\xB7\xA5", "\xF0\x9F\xA6\x99", "\xE2\x96\x81", "\xE1\x9E\x80", "\r"};
  std::uniform_int_distribution<size_t> len(0, max_chars), pick(0, alphabet.size() - 1);
  std::string s;
  for (size_t i = 0, n = len(rng); i < n; ++i) s += alphabet[pick(rng)];
  return s;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8::lead_length(static_cast<unsigned char>(s[i])), s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Textbook BPE: repeatedly merge the adjacent pair with the lowest rank (leftmost on ties).
std::vector<TokenId> naive_bpe(const Tokenizer& tok, const std::map<std::string, TokenId>& ids,
                               const std::map<std::pair<std::string, std::string>, int>& ranks,
                               bool ignore_merges, std::string_view word) {
  if (ignore_merges) {
    if (auto it = ids.find(std::string(word)); it != ids.end()) return {it->second};
  }
  std::vector<std::string> sym = utf8_chars(word);
  while (true) {
    int best = -1, best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = ranks.find({sym[i], sym[i + 1]});
      if (it != ranks.end() && it->second < best_rank) best_rank = it->second, best = static_cast<int>(i);
    }
    if (best < 0) break;
    sym[static_cast<size_t>(best)] += sym[static_cast<size_t>(best) + 1];
    sym.erase(sym.begin() + best + 1);
  }
  std::vector<TokenId> out;
  for (const auto& s : sym) {
    if (auto it = ids.find(s); it != ids.end()) {
      out.push_back(it->second);
    } else {
      for (char c : s) {
        if (auto b = ids.find(std::string(1, c)); b != ids.end()) out.push_back(b->second);
      }
    }
  }
  return out;
}

void check_bpe_against_naive(const std::string& name, int iterations) {
  const Tokenizer& tok = test::vocab_tokenizer(name);
  const Metadata& meta = test::vocab_file(name).meta;
  std::map<std::string, TokenId> ids;
  for (TokenId i = 0; i < tok.n_vocab(); ++i) ids.emplace(tok.piece(i), i);
  std::map<std::pair<std::string, std::string>, int> ranks;
  const auto& merges = meta.get_array_opt("tokenizer.ggml.merges")->items;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i].as_string();
    const size_t sp = m.find(' ', 1);
    ranks.emplace(std::make_pair(m.substr(0, sp), m.substr(sp + 1)), static_cast<int>(i));
  }
  const tokenizer::PreTokenizerSpec* spec = tokenizer::find_pre_tokenizer(tok.pre_tokenizer());
  ASSERT_NE(spec, nullptr);
  const tokenizer::RegexSplitter splitter(spec->regexes);

  std::mt19937 rng(1234);
  for (int iter = 0; iter < iterations; ++iter) {
    const std::string text = random_text(rng, 1 + iter % 40);
    std::vector<TokenId> expected;
    for (std::string_view piece : splitter.split(text)) {
      const auto part = naive_bpe(tok, ids, ranks, spec->ignore_merges, tokenizer::byte_level_encode(piece));
      expected.insert(expected.end(), part.begin(), part.end());
    }
    ASSERT_EQ(tok.encode(text, false, false), expected) << name << ": '" << text << "'";
    ASSERT_EQ(tok.decode(expected), text);
  }
}

TEST(AgainstNaive, Gpt2Bpe) { check_bpe_against_naive("ggml-vocab-gpt-2", 300); }
TEST(AgainstNaive, Llama3Bpe) { check_bpe_against_naive("ggml-vocab-llama-bpe", 300); }

// Textbook SentencePiece BPE: repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring token (leftmost on ties); unknown pieces fall back to <0xNN> byte tokens.
TEST(AgainstNaive, SpmMerges) {
  const std::string name = "ggml-vocab-llama-spm";
  const Tokenizer& tok = test::vocab_tokenizer(name);
  const auto& scores = test::vocab_file(name).meta.get_array_opt("tokenizer.ggml.scores")->items;
  std::map<std::string, TokenId> ids;
  for (TokenId i = 0; i < tok.n_vocab(); ++i) ids.emplace(tok.piece(i), i);

  std::mt19937 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    const std::string text = random_text(rng, 1 + iter % 40);
    if (text.empty()) continue;
    std::string escaped;
    for (char c : " " + text) escaped += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    std::vector<std::string> sym = utf8_chars(escaped);
    while (true) {
      int best = -1;
      double best_score = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = ids.find(sym[i] + sym[i + 1]);
        if (it == ids.end()) continue;
        const double s = scores[static_cast<size_t>(it->second)].as_float();
        if (best < 0 || s > best_score) best = static_cast<int>(i), best_score = s;
      }
      if (best < 0) break;
      sym[static_cast<size_t>(best)] += sym[static_cast<size_t>(best) + 1];
      sym.erase(sym.begin() + best + 1);
    }
    std::vector<TokenId> expected;
    for (const auto& s : sym) {
      if (auto it = ids.find(s); it != ids.end()) {
        expected.push_back(it->second);
        continue;
      }
      for (unsigned char c : s) expected.push_back(static_cast<TokenId>(c) + 3);  // <0xNN>
    }
    ASSERT_EQ(tok.encode(text, false, false), expected) << "'" << text << "'";
    // A literal U+2581 in the input decodes as a space: SPM cannot tell them apart.
    if (text.find("\xE2\x96\x81") == std::string::npos) {
      ASSERT_EQ(tok.decode(expected), text);
    }
  }
}

}  // namespace
}  // namespace peregrine
