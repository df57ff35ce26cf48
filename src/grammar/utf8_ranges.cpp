#include "grammar/utf8_ranges.h"

#include <algorithm>

#include "util/utf8_encode.h"

namespace peregrine {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;
// The last code point of each encoded length: 1, 2, 3 and 4 bytes.
constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};

size_t encoded_length(uint32_t cp) { return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4; }

// Splits [lo, hi] (one encoded length) until the leading bytes of lo and hi bound a rectangle:
// every continuation byte runs over its whole range between them. The split points are where a
// continuation byte wraps (lo's low bits not all 0, or hi's not all 1).
void split_same_length(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  const size_t n = encoded_length(lo);
  for (size_t i = 1; i < n; ++i) {
    const uint32_t low_bits = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~low_bits) == (hi & ~low_bits)) continue;
    if ((lo & low_bits) != 0) {
      split_same_length(lo, lo | low_bits, out);
      split_same_length((lo | low_bits) + 1, hi, out);
      return;
    }
    if ((hi & low_bits) != low_bits) {
      split_same_length(lo, (hi & ~low_bits) - 1, out);
      split_same_length(hi & ~low_bits, hi, out);
      return;
    }
  }
  const std::string a = encode_utf8(lo);
  const std::string b = encode_utf8(hi);
  Utf8Sequence seq;
  for (size_t i = 0; i < n; ++i) seq.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
  std::vector<CodeRange> cut;
  for (CodeRange r : ranges) {
    if (r.lo > r.hi || r.lo > kMaxCodePoint) continue;
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo < kSurrogateLo && r.hi >= kSurrogateLo) {
      cut.push_back({r.lo, kSurrogateLo - 1});
      r.lo = kSurrogateLo;
    }
    if (r.lo >= kSurrogateLo && r.lo <= kSurrogateHi) {
      if (r.hi <= kSurrogateHi) continue;
      r.lo = kSurrogateHi + 1;
    }
    cut.push_back(r);
  }
  std::sort(cut.begin(), cut.end());
  std::vector<CodeRange> merged;
  for (const CodeRange& r : cut) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const CodeRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize_ranges(std::move(out));
}

std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodeRange>& ranges) {
  std::vector<Utf8Sequence> out;
  for (const CodeRange& r : ranges) {
    uint32_t lo = r.lo;
    for (uint32_t end : kLengthEnds) {
      if (lo > r.hi) break;
      if (lo > end) continue;
      const uint32_t hi = std::min(r.hi, end);
      split_same_length(lo, hi, out);
      lo = hi + 1;
    }
  }
  return out;
}

DecodedCodePoint decode_utf8(std::string_view s, size_t at) {
  const auto b = static_cast<unsigned char>(s[at]);
  if (b < 0x80) return {b, 1};
  const size_t n = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
  if (n == 0 || at + n > s.size()) return {};
  uint32_t cp = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[at + k]);
    if ((c & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (c & 0x3F);
  }
  static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};  // below: an overlong form
  if (cp < kLeast[n] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, n};
}

}  // namespace peregrine
