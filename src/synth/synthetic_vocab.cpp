#include "synth/synthetic_vocab.h"

#include <array>
#include <cstdio>
#include <string_view>
#include <unordered_set>

namespace peregrine::synth {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary

// A few frequent words so short English prompts tokenize into whole pieces.
constexpr std::array<std::string_view, 48> kWords = {
    "the", "a", "and", "to", "of", "was", "he", "she", "it", "in", "is", "that",
    "with", "for", "on", "day", "once", "upon", "time", "there", "little", "girl", "boy", "named",
    "play", "they", "her", "his", "said", "big", "had", "you", "not", "at", "so", "very",
    "happy", "friend", "dog", "cat", "tree", "sun", "run", "went", "saw", "one", "we", "I"};

// The k-th string over a..z in length-then-lexicographic order: "aa", "ab", ..., "zz", "aaa", ...
std::string letter_string(uint64_t k) {
  size_t len = 2;
  uint64_t count = 26 * 26;
  while (k >= count) {
    k -= count;
    ++len;
    count *= 26;
  }
  std::string s(len, 'a');
  for (size_t i = len; i-- > 0;) {
    s[i] = static_cast<char>('a' + k % 26);
    k /= 26;
  }
  return s;
}

}  // namespace

SyntheticVocab make_synthetic_vocab(int64_t n_vocab) {
  SyntheticVocab v;
  v.tokens.reserve(static_cast<size_t>(n_vocab));
  v.scores.reserve(static_cast<size_t>(n_vocab));
  v.types.reserve(static_cast<size_t>(n_vocab));
  std::unordered_set<std::string> seen;
  auto add = [&](std::string text, float score, TokenType type) {
    if (static_cast<int64_t>(v.tokens.size()) >= n_vocab || !seen.insert(text).second) return;
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(static_cast<int32_t>(type));
  };

  add("<unk>", 0.f, TokenType::Unknown);
  add("<s>", 0.f, TokenType::Control);
  add("</s>", 0.f, TokenType::Control);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    add(hex, 0.f, TokenType::Byte);
  }

  // Normal pieces: SentencePiece scores are log-probabilities; decreasing scores give the
  // merge order a strict preference, so tokenization is deterministic.
  float score = 0.f;
  auto piece = [&](std::string text) { add(std::move(text), score -= 1.f, TokenType::Normal); };
  piece(std::string(kSpace));
  for (char c = 'a'; c <= 'z'; ++c) piece(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) piece(std::string(kSpace) + c);
  for (std::string_view w : kWords) piece(std::string(kSpace) + std::string(w));
  for (char c = 'A'; c <= 'Z'; ++c) piece(std::string(1, c));
  for (char c = '0'; c <= '9'; ++c) piece(std::string(1, c));
  for (char c : std::string_view(".,!?'\"-:;()")) piece(std::string(1, c));
  for (std::string_view w : kWords) piece(std::string(w));
  // Generated pieces: every letter string, as a word start and as a word continuation, until the
  // vocabulary is full (duplicates of the pieces above are skipped by `add`).
  for (uint64_t k = 0; static_cast<int64_t>(v.tokens.size()) < n_vocab; ++k) {
    std::string s = letter_string(k);
    piece(std::string(kSpace) + s);
    piece(s);
  }
  return v;
}

void add_synthetic_vocab_metadata(Metadata& meta, int64_t n_vocab) {
  SyntheticVocab v = make_synthetic_vocab(n_vocab);
  meta.set("tokenizer.ggml.model", MetaValue::string("llama"));
  meta.set("tokenizer.ggml.tokens", MetaValue::string_array(v.tokens));
  meta.set("tokenizer.ggml.scores", MetaValue::f32_array(v.scores));
  meta.set("tokenizer.ggml.token_type", MetaValue::i32_array(v.types));
  meta.set("tokenizer.ggml.bos_token_id", MetaValue::u32(kBosId));
  meta.set("tokenizer.ggml.eos_token_id", MetaValue::u32(kEosId));
  meta.set("tokenizer.ggml.unknown_token_id", MetaValue::u32(kUnkId));
  meta.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(true));
  meta.set("tokenizer.ggml.add_eos_token", MetaValue::boolean(false));
}

}  // namespace peregrine::synth
