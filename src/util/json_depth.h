#pragma once
// How deeply a JSON text nests arrays and objects, found by a scan that builds nothing. Code that
// serializes, copies or converts a parsed value recurses once per level, so JSON from a client is
// measured before it is parsed, and a value nested deeper than kMaxJsonDepth is never built.
#include <cstddef>
#include <string_view>

namespace peregrine {

// Client JSON (request bodies, tool-call arguments in messages) nests at most this deep.
inline constexpr size_t kMaxJsonDepth = 128;

// The deepest nesting of arrays and objects in `text`; the scan stops as soon as it passes
// `limit` (returning limit + 1), so refusing a deep text costs no more than reading up to it.
// Exact for valid JSON; for anything else it is a figure the JSON parser then refuses anyway.
inline size_t json_nesting_depth(std::string_view text, size_t limit = kMaxJsonDepth) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace peregrine
