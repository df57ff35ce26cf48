#pragma once
// Code point ranges as UTF-8 byte patterns, so a character class such as [^"\\] becomes
// alternatives of byte-range sequences the byte-level matcher runs directly, e.g.
//   U+0080..U+07FF  ->  [C2-DF][80-BF]
//   U+0800..U+FFFF  ->  [E0][A0-BF][80-BF] | [E1-EC][80-BF][80-BF] | [ED][80-9F][80-BF] | ...
// Each sequence matches exactly the encodings of its code points: overlong forms and surrogates
// are never matched.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodeRange {
  uint32_t lo = 0;
  uint32_t hi = 0;  // inclusive
  bool operator==(const CodeRange&) const = default;
  auto operator<=>(const CodeRange&) const = default;
};

struct ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;  // inclusive
};

// One UTF-8 byte pattern: byte i of a match lies in ranges[i] (1 to 4 ranges).
using Utf8Sequence = std::vector<ByteRange>;

// Sorted, merged, without surrogates (U+D800..U+DFFF) and clipped to U+10FFFF.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
// The code points (without surrogates) that are not in `ranges` (which must be normalized).
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);

// Byte patterns for the normalized ranges, together matching exactly the UTF-8 encodings of their
// code points, each encoding by one pattern.
std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodeRange>& ranges);

// The code point whose UTF-8 encoding starts at s[at], and the encoding's length in bytes; length
// 0 when the bytes there are not UTF-8 (a stray continuation byte, a sequence cut short, an
// overlong form, a surrogate, past U+10FFFF). Grammar text and patterns are read with it, so the
// grammars they compile to only ever write UTF-8.
struct DecodedCodePoint {
  uint32_t cp = 0;
  size_t length = 0;
};
DecodedCodePoint decode_utf8(std::string_view s, size_t at);

}  // namespace peregrine
