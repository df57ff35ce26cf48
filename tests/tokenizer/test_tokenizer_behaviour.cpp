// Special tokens, BOS/EOS rules, decoding, streaming, the llama2.c vocabulary and bad metadata.
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>

#include "format/llama2c.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixtures.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::vocab_file;
using test::vocab_tokenizer;
using Ids = std::vector<TokenId>;

TEST(Tokenizer, KindsAndSpecialIds) {
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  EXPECT_EQ(spm.model_kind(), "llama");
  EXPECT_EQ(spm.n_vocab(), 32000);
  EXPECT_EQ(spm.bos(), 1);
  EXPECT_EQ(spm.eos(), 2);
  EXPECT_TRUE(spm.add_bos());
  EXPECT_TRUE(spm.is_control(1));
  EXPECT_FALSE(spm.is_control(15043));
  EXPECT_TRUE(spm.is_end_of_generation(2));
  EXPECT_FALSE(spm.is_end_of_generation(1));
  EXPECT_EQ(spm.piece(15043), "\xE2\x96\x81Hello");

  const Tokenizer& l3 = vocab_tokenizer("ggml-vocab-llama-bpe");
  EXPECT_EQ(l3.model_kind(), "gpt2");
  EXPECT_EQ(l3.pre_tokenizer(), "llama-bpe");
  EXPECT_EQ(l3.bos(), 128000);
  EXPECT_TRUE(l3.add_bos());  // llama3 pre-tokenizer default
  EXPECT_TRUE(l3.is_end_of_generation(128001));  // <|end_of_text|> (EOS)
  EXPECT_TRUE(l3.is_end_of_generation(128009));  // <|eot_id|>, found by its text
  EXPECT_FALSE(l3.is_end_of_generation(9906));
  EXPECT_FALSE(l3.is_end_of_generation(-1));
  EXPECT_FALSE(l3.is_end_of_generation(1 << 30));

  const Tokenizer& gpt2 = vocab_tokenizer("ggml-vocab-gpt-2");
  EXPECT_EQ(gpt2.pre_tokenizer(), "gpt-2");
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_TRUE(gpt2.is_end_of_generation(50256));
}

TEST(Tokenizer, AddSpecialFollowsTheModel) {
  EXPECT_EQ(vocab_tokenizer("ggml-vocab-llama-spm").encode("Hello", true, false), (Ids{1, 15043}));
  EXPECT_EQ(vocab_tokenizer("ggml-vocab-llama-spm").encode("", true, false), (Ids{1}));
  EXPECT_EQ(vocab_tokenizer("ggml-vocab-llama-bpe").encode("Hello", true, false), (Ids{128000, 9906}));
  EXPECT_EQ(vocab_tokenizer("ggml-vocab-gpt-2").encode("Hello", true, false), (Ids{15496}));
  EXPECT_TRUE(vocab_tokenizer("ggml-vocab-gpt-2").encode("", false, false).empty());
}

TEST(Tokenizer, ParseSpecialMatchesControlTokens) {
  const Tokenizer& l3 = vocab_tokenizer("ggml-vocab-llama-bpe");
  const TokenId eot = 128009;
  ASSERT_EQ(l3.piece(eot), "<|eot_id|>");
  EXPECT_EQ(l3.encode("Hello<|eot_id|>", false, true), (Ids{9906, eot}));
  const Ids plain = l3.encode("Hello<|eot_id|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(l3.decode(plain), "Hello<|eot_id|>");

  // SPM: text after a special token gets the space prefix again, like llama.cpp.
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  EXPECT_EQ(spm.encode("<s>Hello</s>", false, true), (Ids{1, 15043, 2}));
  EXPECT_NE(spm.encode("<s>Hello", false, false).front(), 1);
}

TEST(Tokenizer, Phi3SpecialTokensEatTrailingSpace) {
  // llama.cpp gives Phi-3's special tokens rstrip (keyed on general.name). </s> is user-defined
  // there but also on llama.cpp's end-of-generation list, which makes it a control token: it is
  // matched only with parse_special.
  const Tokenizer& phi = vocab_tokenizer("ggml-vocab-phi-3");
  const Ids ids = phi.encode("Hi</s>  there", false, true);
  EXPECT_EQ(ids, (Ids{phi.encode("Hi", false, false)[0], 2, phi.encode("there", false, false)[0]}));
  EXPECT_EQ(phi.decode(ids, true), "Hi</s> there");  // " there" got a prefix space again
  const Ids end = phi.encode("<|end|>\nHi", false, true);
  ASSERT_FALSE(end.empty());
  EXPECT_EQ(phi.piece(end[0]), "<|end|>");
  EXPECT_TRUE(phi.is_end_of_generation(end[0]));
  EXPECT_EQ(end.size(), 2u);  // rstrip ate the newline
  const Ids plain = phi.encode("Hi</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
}

TEST(Tokenizer, LiteralSpansKeepSpecialTextPlain) {
  const Tokenizer& l3 = vocab_tokenizer("ggml-vocab-llama-bpe");
  const TokenId eot = 128009;
  // "<|eot_id|>A<|eot_id|>": the first occurrence is marked literal, the second is not.
  const std::string text = "<|eot_id|>Hello<|eot_id|>";
  const std::vector<TextSpan> found = l3.find_special_text(text);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].offset, 0u);
  EXPECT_EQ(found[0].length, 10u);
  EXPECT_EQ(found[1].offset, 15u);
  const std::vector<TextSpan> literal = {found[0]};
  const Ids ids = l3.encode_with_literals(text, false, literal);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
  EXPECT_EQ(ids.back(), eot);
  // The literal part tokenizes exactly as plain text would.
  Ids expected = l3.encode("<|eot_id|>Hello", false, false);
  expected.push_back(eot);
  EXPECT_EQ(ids, expected);
  // No literal spans: same as parse_special. A span touching only part of the token text is enough.
  EXPECT_EQ(l3.encode_with_literals(text, true, {}), l3.encode(text, true, true));
  const std::vector<TextSpan> partial = {{17, 1}};  // one byte inside the second "<|eot_id|>"
  const Ids partial_ids = l3.encode_with_literals(text, false, partial);
  EXPECT_EQ(std::count(partial_ids.begin(), partial_ids.end(), eot), 1);
  EXPECT_EQ(partial_ids.front(), eot);

  // SPM: </s><s> marked literal stay text; user-defined tokens are unaffected (none here).
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  const std::string chat = "<s>[INST] hi </s><s> there [/INST]";
  const std::vector<TextSpan> all = spm.find_special_text(chat);
  ASSERT_EQ(all.size(), 3u);
  const std::vector<TextSpan> content_specials = {all[1], all[2]};
  const Ids safe = spm.encode_with_literals(chat, false, content_specials);
  EXPECT_EQ(safe.front(), 1);
  EXPECT_EQ(std::count(safe.begin(), safe.end(), 1), 1);
  EXPECT_EQ(std::count(safe.begin(), safe.end(), 2), 0);
  EXPECT_EQ(spm.decode(safe), " [INST] hi </s><s> there [/INST]");
}

TEST(Tokenizer, MaxPieceBytesBoundsBytesPerToken) {
  for (const char* name : {"ggml-vocab-llama-spm", "ggml-vocab-llama-bpe", "ggml-vocab-gpt-2"}) {
    const Tokenizer& tok = vocab_tokenizer(name);
    const size_t bound = tok.max_piece_bytes();
    EXPECT_GT(bound, 1u) << name;
    // Every token's decoded bytes (what it stands for in the input) fit the bound.
    for (TokenId id = 0; id < tok.n_vocab(); ++id)
      EXPECT_LE(tok.token_to_bytes(id, true).size(), bound) << name << " " << id;
  }
}

TEST(Tokenizer, DecodeRulesForSpecialAndOutOfRangeIds) {
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  EXPECT_EQ(spm.token_to_bytes(1), "");
  EXPECT_EQ(spm.token_to_bytes(1, true), "<s>");
  EXPECT_EQ(spm.token_to_bytes(13), "\n");
  EXPECT_EQ(spm.token_to_bytes(15043), " Hello");
  EXPECT_EQ(spm.token_to_bytes(-5), "");
  EXPECT_EQ(spm.token_to_bytes(32000), "");
  EXPECT_THROW(spm.piece(32000), std::out_of_range);
  // The first token loses the prefix space; with BOS first, BOS consumes that rule (llama.cpp).
  EXPECT_EQ(spm.decode(Ids{15043, 2787}), "Hello World");
  EXPECT_EQ(spm.decode(Ids{1, 15043, 2787}), " Hello World");
  EXPECT_EQ(spm.decode(Ids{1, 15043}, true), "<s> Hello");

  const Tokenizer& l3 = vocab_tokenizer("ggml-vocab-llama-bpe");
  EXPECT_EQ(l3.decode(Ids{128000, 9906, 1917}), "Hello world");
  EXPECT_EQ(l3.decode(Ids{128000, 9906}, true), "<|begin_of_text|>Hello");
}

TEST(Tokenizer, LlamaBpeLoadsFast) {
  const ModelFile& f = vocab_file("ggml-vocab-llama-bpe");
  // CPU time, not wall time: the test machines are shared and often oversubscribed.
  const std::clock_t t0 = std::clock();
  const Tokenizer tok = Tokenizer::from_metadata(f.meta, "llama-bpe");
  const double s = static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC;
  EXPECT_EQ(tok.n_vocab(), 128256);
  EXPECT_LT(s, 1.0) << "loading a 128k vocabulary with 280k merges took " << s << " s of CPU";
  std::printf("llama-bpe tokenizer load: %.3f s CPU\n", s);
}

// Feeds ids through a StreamDecoder; every piece must be valid UTF-8 and together they must
// equal decode().
void expect_stream_matches_decode(const Tokenizer& tok, const std::string& text) {
  const Ids ids = tok.encode(text, false, false);
  StreamDecoder stream(tok);
  std::string streamed;
  for (TokenId id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(utf8::is_valid(piece)) << "invalid UTF-8 emitted for '" << text << "'";
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, tok.decode(ids));
  EXPECT_EQ(streamed, text);
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const std::vector<std::string> texts = {
      "\xF0\x9F\xA6\x99 llama \xF0\x9F\x98\x81!",  // emoji that SPM spells as byte tokens
      "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple \xE5\xB7\xA5\xE4\xBD\x9C",  // CJK
      "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B",  // Khmer
      " Hello\n\tworld  ",
  };
  for (const char* name : {"ggml-vocab-llama-spm", "ggml-vocab-phi-3", "ggml-vocab-llama-bpe",
                           "ggml-vocab-gpt-2"}) {
    for (const auto& t : texts) expect_stream_matches_decode(vocab_tokenizer(name), t);
  }
}

TEST(StreamDecoder, EmitsAWholeEmojiOnlyWithItsLastByte) {
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  // 🦙 = F0 9F A6 99 = byte tokens 243 162 169 156 (<0xNN> is id NN + 3).
  StreamDecoder s(spm);
  EXPECT_EQ(s.push(243), "");
  EXPECT_EQ(s.push(162), "");
  EXPECT_EQ(s.push(169), "");
  EXPECT_EQ(s.push(156), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamDecoder, ReplacesBytesThatCannotFormACharacter) {
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  StreamDecoder s(spm);
  EXPECT_EQ(s.push(0xF0 + 3), "");                     // lead byte of a 4-byte sequence
  EXPECT_EQ(s.push(15043), "\xEF\xBF\xBD Hello");       // broken by ASCII: U+FFFD, then text
  EXPECT_EQ(s.push(0xE6 + 3), "");
  EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");                 // incomplete at the end
  EXPECT_EQ(s.flush(), "");
  EXPECT_EQ(s.push(0x80 + 3), "\xEF\xBF\xBD");          // stray continuation byte
}

TEST(StreamDecoder, LeadingSpaceRuleMatchesDecode) {
  const Tokenizer& spm = vocab_tokenizer("ggml-vocab-llama-spm");
  StreamDecoder fresh(spm);
  EXPECT_EQ(fresh.push(15043), "Hello");
  EXPECT_EQ(fresh.push(2787), " World");
  StreamDecoder continuing(spm, false, /*at_text_start=*/false);
  EXPECT_EQ(continuing.push(15043), " Hello");
  StreamDecoder rendered(spm, /*render_special=*/true);
  EXPECT_EQ(rendered.push(1), "<s>");
}

TEST(Llama2cTokenizer, EncodesAndDecodesStories260K) {
  const ModelFile f = read_llama2c(test::shared_file("models/stories260K/stories260K.bin"),
                                   test::shared_file("models/stories260K/tok512.bin"));
  const Tokenizer tok = Tokenizer::from_metadata(f.meta, "stories260K");
  EXPECT_EQ(tok.n_vocab(), 512);
  EXPECT_EQ(tok.model_kind(), "llama");
  const Ids ids = tok.encode("Once upon a time", true, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tok.decode(ids), " Once upon a time");  // BOS consumes the space-strip rule
  EXPECT_EQ(tok.decode(std::span(ids).subspan(1)), "Once upon a time");
  // The start of the model's known greedy output (README).
  const Ids known = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317};
  EXPECT_EQ(tok.decode(known).substr(0, 29), "Once upon a time, there was a");
}

// ---- bad metadata ----

Metadata good_spm_metadata() {
  Metadata m;
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b"};
  const std::vector<float> scores = {0, 0, 0, -1, -2};
  const std::vector<int32_t> types = {2, 3, 3, 1, 1};
  m.set("tokenizer.ggml.model", MetaValue::string("llama"));
  m.set("tokenizer.ggml.tokens", MetaValue::string_array(tokens));
  m.set("tokenizer.ggml.scores", MetaValue::f32_array(scores));
  m.set("tokenizer.ggml.token_type", MetaValue::i32_array(types));
  return m;
}

void expect_format_error(const Metadata& m, const std::string& needle) {
  try {
    (void)Tokenizer::from_metadata(m, "bad.gguf");
    ADD_FAILURE() << "no FormatError; expected one mentioning '" << needle << "'";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(BadMetadata, GivesFormatErrors) {
  {
    const Tokenizer ok = Tokenizer::from_metadata(good_spm_metadata(), "good.gguf");
    EXPECT_EQ(ok.encode("a", false, false), (Ids{3}));
  }
  Metadata m = good_spm_metadata();
  m = Metadata();
  m.set("tokenizer.ggml.model", MetaValue::string("llama"));
  expect_format_error(m, "tokenizer.ggml.tokens");
  expect_format_error(Metadata(), "tokenizer.ggml.model");

  m = good_spm_metadata();
  const std::vector<float> short_scores = {0, 0};
  m.set("tokenizer.ggml.scores", MetaValue::f32_array(short_scores));
  expect_format_error(m, "scores");

  m = good_spm_metadata();
  const std::vector<int32_t> short_types = {1};
  m.set("tokenizer.ggml.token_type", MetaValue::i32_array(short_types));
  expect_format_error(m, "token_type");

  m = good_spm_metadata();
  m.set("tokenizer.ggml.bos_token_id", MetaValue::u32(99));
  expect_format_error(m, "bos_token_id");
  m = good_spm_metadata();
  m.set("tokenizer.ggml.eos_token_id", MetaValue::i32(-3));
  expect_format_error(m, "eos_token_id");

  m = good_spm_metadata();
  m.set("tokenizer.ggml.model", MetaValue::string("wordpiece9000"));
  expect_format_error(m, "supported: llama, gpt2");

  m = good_spm_metadata();
  m.set("tokenizer.ggml.model", MetaValue::string("gpt2"));
  expect_format_error(m, "merges");
  const std::vector<std::string> merges = {"a b"};
  m.set("tokenizer.ggml.merges", MetaValue::string_array(merges));
  m.set("tokenizer.ggml.pre", MetaValue::string("klingon"));
  expect_format_error(m, "llama-bpe");  // the list of supported pre-tokenizers

  m = good_spm_metadata();
  m.set("tokenizer.ggml.tokens", MetaValue::string("not an array"));
  expect_format_error(m, "tokens");

  m = good_spm_metadata();
  const std::vector<std::string> dup = {"<unk>", "<s>", "</s>", "b", "b"};
  m.set("tokenizer.ggml.tokens", MetaValue::string_array(dup));
  expect_format_error(m, "duplicate");

  m = good_spm_metadata();
  m.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(true));
  m.set("tokenizer.ggml.bos_token_id", MetaValue::u32(1));
  EXPECT_NO_THROW((void)Tokenizer::from_metadata(m, "ok.gguf"));
}

}  // namespace
}  // namespace peregrine
