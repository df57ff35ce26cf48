// UTF-8 checking and repair, and the GPT-2 byte-level mapping.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

namespace peregrine {
namespace {

using utf8::SeqStatus;

TEST(Utf8, ClassifiesSequences) {
  EXPECT_EQ(utf8::check_sequence("a").status, SeqStatus::Valid);
  EXPECT_EQ(utf8::check_sequence("\xC3\xA4").length, 2u);
  EXPECT_EQ(utf8::check_sequence("\xF0\x9F\xA6\x99").length, 4u);
  EXPECT_EQ(utf8::check_sequence("\xF0\x9F").status, SeqStatus::Incomplete);
  EXPECT_EQ(utf8::check_sequence("\xF0\x9F").length, 2u);
  EXPECT_EQ(utf8::check_sequence("\x80").status, SeqStatus::Invalid);
  EXPECT_EQ(utf8::check_sequence("\xC0\x80").status, SeqStatus::Invalid);      // overlong
  EXPECT_EQ(utf8::check_sequence("\xED\xA0\x80").status, SeqStatus::Invalid);  // surrogate
  EXPECT_EQ(utf8::check_sequence("\xF4\x90\x80\x80").status, SeqStatus::Invalid);  // > U+10FFFF
  const auto broken = utf8::check_sequence("\xE6\x88" "a");
  EXPECT_EQ(broken.status, SeqStatus::Invalid);
  EXPECT_EQ(broken.length, 2u);  // the maximal bad prefix becomes one U+FFFD
}

TEST(Utf8, SanitizeOnRandomBytes) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 40);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (int n = len(rng); n > 0; --n) s += static_cast<char>(byte(rng));
    const std::string clean = utf8::sanitize(s);
    EXPECT_TRUE(utf8::is_valid(clean));
    if (utf8::is_valid(s)) EXPECT_EQ(clean, s);
    EXPECT_EQ(utf8::sanitize(clean), clean);
  }
  EXPECT_EQ(utf8::sanitize("a\xFF" "b\xE6\x88"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
}

TEST(ByteLevel, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string enc = tokenizer::byte_level_encode(all);
  EXPECT_TRUE(utf8::is_valid(enc));
  EXPECT_EQ(tokenizer::byte_level_decode(enc), all);
  EXPECT_EQ(tokenizer::byte_level_encode(" "), "\xC4\xA0");  // Ġ
  EXPECT_EQ(tokenizer::byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(tokenizer::byte_level_encode("A"), "A");
}

}  // namespace
}  // namespace peregrine
