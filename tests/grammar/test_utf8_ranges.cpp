// UTF-8 byte patterns of code point ranges, against a brute force over every code point.
#include <gtest/gtest.h>

#include <random>

#include "grammar/utf8_ranges.h"
#include "util/utf8_encode.h"

namespace peregrine {
namespace {

bool matches(const Utf8Sequence& seq, const std::string& bytes) {
  if (seq.size() != bytes.size()) return false;
  for (size_t i = 0; i < seq.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b < seq[i].lo || b > seq[i].hi) return false;
  }
  return true;
}

bool in(const std::vector<CodeRange>& ranges, uint32_t cp) {
  for (const CodeRange& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

// Every code point's encoding is matched by exactly one pattern iff the code point is in the
// ranges, and the patterns match no other byte strings (their sizes add up to the count).
void check_exact(const std::vector<CodeRange>& ranges) {
  const std::vector<Utf8Sequence> seqs = utf8_sequences(ranges);
  uint64_t pattern_strings = 0;
  for (const Utf8Sequence& s : seqs) {
    uint64_t n = 1;
    for (const ByteRange& r : s) n *= static_cast<uint64_t>(r.hi - r.lo + 1);
    pattern_strings += n;
  }
  uint64_t members = 0;
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string bytes = encode_utf8(cp);
    int hits = 0;
    for (const Utf8Sequence& s : seqs) hits += matches(s, bytes) ? 1 : 0;
    const bool member = in(ranges, cp);
    members += member ? 1 : 0;
    ASSERT_EQ(hits, member ? 1 : 0) << "code point " << cp;
  }
  EXPECT_EQ(pattern_strings, members);
}

TEST(Utf8Ranges, WholeRangeAndBoundaries) {
  check_exact(normalize_ranges({{0, kMaxCodePoint}}));
  check_exact(normalize_ranges({{0x7F, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000}}));
  check_exact(normalize_ranges({{0xD7FF, 0xE000}}));  // around the surrogates
}

TEST(Utf8Ranges, RandomRangesAndComplements) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<CodeRange> ranges;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      // Mostly small code points, sometimes anywhere.
      const uint32_t span = (rng() % 3 == 0) ? kMaxCodePoint : 0x3000;
      const auto lo = static_cast<uint32_t>(rng() % span);
      ranges.push_back({lo, lo + static_cast<uint32_t>(rng() % 5000)});
    }
    ranges = normalize_ranges(ranges);
    check_exact(ranges);
    check_exact(complement_ranges(ranges));
  }
}

TEST(Utf8Ranges, NormalizeDropsSurrogatesAndMerges) {
  const auto r = normalize_ranges({{0xD000, 0xE000}, {5, 9}, {1, 4}, {0x110000, 0x120000}});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], (CodeRange{1, 9}));
  EXPECT_EQ(r[1], (CodeRange{0xD000, 0xD7FF}));
  EXPECT_EQ(r[2], (CodeRange{0xE000, 0xE000}));
  EXPECT_TRUE(complement_ranges(normalize_ranges({{0, kMaxCodePoint}})).empty());
}

}  // namespace
}  // namespace peregrine
