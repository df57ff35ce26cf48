// JSON Schema `pattern` (an ECMAScript regular expression) to GBNF for the JSON-encoded string
// contents. The regex describes the decoded string; the grammar writes each character as JSON
// needs it: `"` and `\` escaped, other characters raw. Control characters are left out (the
// output is still valid, just never contains them).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/utf8_ranges.h"

namespace peregrine {
namespace {

constexpr uint32_t kMaxPatternRepeat = 1000;
constexpr size_t kMaxPatternNesting = 64;

// ECMAScript's \s.
std::vector<CodeRange> space_ranges() {
  return normalize_ranges({{0x09, 0x0D},
                           {0x20, 0x20},
                           {0xA0, 0xA0},
                           {0x1680, 0x1680},
                           {0x2000, 0x200A},
                           {0x2028, 0x2029},
                           {0x202F, 0x202F},
                           {0x205F, 0x205F},
                           {0x3000, 0x3000},
                           {0xFEFF, 0xFEFF}});
}
std::vector<CodeRange> digit_ranges() { return {{'0', '9'}}; }
std::vector<CodeRange> word_ranges() { return normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }

std::string hex_escape(uint32_t cp) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\\U";
  for (int shift = 28; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
  return out;
}

bool in_ranges(const std::vector<CodeRange>& ranges, uint32_t cp) {
  for (const CodeRange& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

// The members of a class that JSON writes escaped (the quote, the backslash and control
// characters: \b \t \n \f \r, else \u00XX) as one GBNF group starting with the backslash, so a
// matcher holds one stack for all of them, not one each.
std::string escapes(const std::vector<CodeRange>& ranges) {
  static const char* kHex = "0123456789ABCDEF";
  std::string letters;
  std::string low[2];  // \u000X and \u001X: the last hex digits
  if (in_ranges(ranges, '"')) letters += '"';
  if (in_ranges(ranges, '\\')) letters += "\\\\";
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!in_ranges(ranges, c)) continue;
    const char* shortcut = c == '\b' ? "b" : c == '\t' ? "t" : c == '\n' ? "n" : c == '\f' ? "f" : c == '\r' ? "r" : "";
    if (*shortcut != '\0') {
      letters += shortcut;
    } else {
      low[c >> 4] += kHex[c & 15];
    }
  }
  std::string alts;
  auto add = [&](const std::string& a) { alts += (alts.empty() ? "" : " | ") + a; };
  if (!letters.empty()) add("[" + letters + "]");
  for (int h = 0; h < 2; ++h) {
    if (!low[h].empty()) add("\"u00" + std::to_string(h) + "\" [" + low[h] + "]");
  }
  return alts.empty() ? "" : R"("\\" ( )" + alts + " )";
}

// A set of code points as GBNF for its JSON-encoded form.
std::string class_to_gbnf(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> plain;
  for (const CodeRange& r : ranges) {
    // Drop control characters, the quote and the backslash: they are written escaped below (or,
    // for controls, not at all).
    std::vector<CodeRange> cut = {{std::max(r.lo, uint32_t{0x20}), r.hi}};
    for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
      std::vector<CodeRange> next;
      for (const CodeRange& c : cut) {
        if (c.lo > c.hi) continue;
        if (special < c.lo || special > c.hi) {
          next.push_back(c);
          continue;
        }
        if (special > c.lo) next.push_back({c.lo, special - 1});
        if (special < c.hi) next.push_back({special + 1, c.hi});
      }
      cut = next;
    }
    for (const CodeRange& c : cut) {
      if (c.lo <= c.hi) plain.push_back(c);
    }
  }
  plain = normalize_ranges(plain);
  std::vector<std::string> alts;
  if (!plain.empty()) {
    std::string cls = "[";
    for (const CodeRange& r : plain) {
      cls += hex_escape(r.lo);
      if (r.hi != r.lo) cls += "-" + hex_escape(r.hi);
    }
    alts.push_back(cls + "]");
  }
  if (std::string escaped = escapes(ranges); !escaped.empty()) alts.push_back(escaped);
  if (alts.empty()) throw GrammarError("json schema: pattern has a character class of control characters only");
  if (alts.size() == 1) return alts.front();
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

// A piece of the pattern as GBNF, and whether it can match the empty string.
struct Piece {
  std::string gbnf;
  bool empty_ok = false;
};

class RegexParser {
 public:
  explicit RegexParser(const std::string& p) : p_(p) {}

  std::string translate() {
    bool anchored_start = false;
    bool anchored_end = false;
    size_t end = p_.size();
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      i_ = 1;
    }
    if (end > i_ && p_[end - 1] == '$' && !escaped_at(end - 1)) {
      anchored_end = true;
      --end;
    }
    end_ = end;
    const bool top_level_or = has_top_level_alternation();
    if (top_level_or && (anchored_start || anchored_end)) {
      fail("anchors with a top-level '|' are ambiguous; group the alternatives, as in ^(a|b)$");
    }
    std::string body = alternation(0).gbnf;
    if (i_ != end_) fail(p_[i_] == ')' ? "unbalanced ')'" : "unexpected '" + std::string(1, p_[i_]) + "'");
    const std::string any = "char*";
    if (!anchored_start) body = any + " ( " + body + " )";
    if (!anchored_end) body = "( " + body + " ) " + any;
    return body;
  }

 private:
  // Errors name the client's pattern (cut to kQuotedBytes), never a rule of the GBNF it becomes.
  [[noreturn]] void fail(const std::string& what) const {
    constexpr size_t kQuotedBytes = 120;
    std::string quoted = p_;
    if (quoted.size() > kQuotedBytes) {
      size_t cut = kQuotedBytes;
      while (cut > 0 && (static_cast<unsigned char>(quoted[cut]) & 0xC0) == 0x80) --cut;  // whole characters
      quoted = quoted.substr(0, cut) + "...";
    }
    throw GrammarError("json schema: pattern '" + quoted + "': " + what);
  }

  bool escaped_at(size_t pos) const {
    size_t backslashes = 0;
    while (pos > backslashes && p_[pos - backslashes - 1] == '\\') ++backslashes;
    return backslashes % 2 == 1;
  }

  bool has_top_level_alternation() const {
    int depth = 0;
    bool in_class = false;
    for (size_t j = i_; j < end_; ++j) {
      const char c = p_[j];
      if (c == '\\') {
        ++j;
      } else if (in_class) {
        in_class = c != ']';
      } else if (c == '[') {
        in_class = true;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      } else if (c == '|' && depth == 0) {
        return true;
      }
    }
    return false;
  }

  bool more() const { return i_ < end_; }
  char peek() const { return i_ < end_ ? p_[i_] : '\0'; }

  Piece alternation(size_t depth) {
    if (depth > kMaxPatternNesting) fail("groups nested too deeply");
    Piece first = sequence(depth);
    Piece out{"( " + first.gbnf, first.empty_ok};
    while (peek() == '|') {
      ++i_;
      const Piece alt = sequence(depth);
      out.gbnf += " | " + alt.gbnf;
      out.empty_ok = out.empty_ok || alt.empty_ok;
    }
    out.gbnf += " )";
    return out;
  }

  Piece sequence(size_t depth) {
    Piece out{"\"\"", true};
    while (more() && peek() != '|' && peek() != ')') {
      const Piece item = quantified(depth);
      out.gbnf += " " + item.gbnf;
      out.empty_ok = out.empty_ok && item.empty_ok;
    }
    return out;
  }

  // A repetition (more than once) of something that can match empty text matches the same text
  // in countless ways: unbounded, the grammar could loop without reading (refused by the
  // builder, naming an internal rule); bounded, the matcher's stacks multiply with every
  // character ((a{0,9}){0,9} holds 9 ways to have read one a). Refused here, in the pattern's
  // own terms.
  Piece quantified(size_t depth) {
    const size_t start = i_;
    Piece piece = atom(depth);
    while (more()) {
      const char c = peek();
      std::string q;
      bool repeats = true;   // may take the atom more than once
      bool optional = true;  // may take it zero times
      if (c == '*' || c == '+' || c == '?') {
        q = std::string(1, c);
        repeats = c != '?';
        optional = c != '+';
        ++i_;
      } else if (c == '{' && is_quantifier_brace()) {
        const auto [lo, hi, text] = braces();
        q = text;
        repeats = hi > 1;
        optional = lo == 0;
      } else {
        break;
      }
      if (repeats && piece.empty_ok) {
        fail("'" + p_.substr(start, i_ - start) +
             "' repeats something that can match empty text, so it matches the same text in countless ways; "
             "make the repeated part non-empty (as in a* for (a?)*)");
      }
      if (peek() == '?') ++i_;  // lazy: the same strings
      piece.gbnf = "( " + piece.gbnf + " )" + q;
      piece.empty_ok = piece.empty_ok || optional;
    }
    return piece;
  }

  bool is_quantifier_brace() const {
    size_t j = i_ + 1;
    bool digits = false;
    while (j < end_ && (std::isdigit(static_cast<unsigned char>(p_[j])) != 0 || p_[j] == ',')) {
      digits = digits || p_[j] != ',';
      ++j;
    }
    return digits && j < end_ && p_[j] == '}';
  }

  uint32_t number() {
    uint32_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek())) != 0) {
      v = v * 10 + static_cast<uint32_t>(peek() - '0');
      if (v > kMaxPatternRepeat) fail("repetition bound above " + std::to_string(kMaxPatternRepeat));
      ++i_;
    }
    return v;
  }

  struct Braces {
    uint32_t lo = 0;
    uint32_t hi = 0;  // UINT32_MAX: unbounded
    std::string gbnf;
  };
  Braces braces() {
    ++i_;
    Braces b;
    b.lo = number();
    b.hi = b.lo;
    b.gbnf = "{" + std::to_string(b.lo);
    if (peek() == ',') {
      ++i_;
      b.gbnf += ",";
      b.hi = UINT32_MAX;
      if (peek() != '}') {
        b.hi = number();
        if (b.hi < b.lo) fail("repetition {m,n} with n < m");
        b.gbnf += std::to_string(b.hi);
      }
    }
    ++i_;  // '}'
    b.gbnf += "}";
    return b;
  }

  Piece atom(size_t depth) {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (peek() == '?') {
        if (p_.compare(i_, 2, "?:") == 0) {
          i_ += 2;
        } else if (p_.compare(i_, 2, "?<") == 0 && i_ + 2 < end_ && p_[i_ + 2] != '=' && p_[i_ + 2] != '!') {
          const size_t close = p_.find('>', i_);
          if (close == std::string::npos || close >= end_) fail("unterminated group name");
          i_ = close + 1;
        } else {
          fail("lookaround assertions ((?=, (?!, (?<=, (?<!) are not supported");
        }
      }
      Piece inner = alternation(depth + 1);
      if (peek() != ')') fail("missing ')'");
      ++i_;
      return inner;
    }
    if (c == '[') return {class_to_gbnf(bracket())};
    if (c == '.') {
      ++i_;
      return {class_to_gbnf(complement_ranges(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})))};
    }
    if (c == '\\') return {escape_atom()};
    if (c == '^' || c == '$') fail("anchors are only supported at the start (^) and the end ($)");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail(std::string("nothing to repeat before '") + c + "'");
    const uint32_t cp = literal_code_point_consume();
    return {class_to_gbnf({{cp, cp}})};
  }

  uint32_t literal_code_point_consume() {
    const auto [cp, len] = decode_at(i_);
    i_ += len;
    return cp;
  }

  std::pair<uint32_t, size_t> decode_at(size_t at) const {
    const DecodedCodePoint d = decode_utf8(p_, at);
    if (d.length == 0) fail("invalid UTF-8");
    return {d.cp, d.length};
  }

  // After a backslash: a class escape (\d, \w, \s and negations) or one character.
  std::vector<CodeRange> escape_ranges(bool in_class) {
    ++i_;
    if (!more()) fail("'\\' at the end");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return digit_ranges();
      case 'D':
        return complement_ranges(digit_ranges());
      case 'w':
        return word_ranges();
      case 'W':
        return complement_ranges(word_ranges());
      case 's':
        return space_ranges();
      case 'S':
        return complement_ranges(space_ranges());
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        return one(0);
      case 'x':
        return one(hex(2));
      case 'u':
        return one(hex(4));
      case 'b':
        if (in_class) return one('\b');
        fail("word boundaries (\\b) are not supported");
      case 'B':
        fail("word boundaries (\\B) are not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(c)) != 0) fail("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(c)) != 0) fail(std::string("unknown escape '\\") + c + "'");
        --i_;
        return one(literal_code_point_consume());
    }
  }

  uint32_t hex(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char c = peek();
      const int h = std::isdigit(static_cast<unsigned char>(c)) != 0 ? c - '0'
                    : (c >= 'a' && c <= 'f')                         ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F')                         ? c - 'A' + 10
                                                                     : -1;
      if (h < 0) fail("escape needs " + std::to_string(n) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(h);
      ++i_;
    }
    return v;
  }

  static std::vector<CodeRange> one(uint32_t cp) { return {{cp, cp}}; }
  static bool is_single(const std::vector<CodeRange>& r) { return r.size() == 1 && r[0].lo == r[0].hi; }

  std::string escape_atom() { return class_to_gbnf(escape_ranges(false)); }

  // One member of a bracket class: an escape (maybe a class such as \d) or a character.
  std::vector<CodeRange> class_item() {
    if (peek() == '\\') return escape_ranges(true);
    return one(literal_code_point_consume());
  }

  std::vector<CodeRange> bracket() {
    ++i_;
    const bool negated = peek() == '^';
    if (negated) ++i_;
    std::vector<CodeRange> ranges;
    bool first = true;
    while (true) {
      if (!more()) fail("unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      std::vector<CodeRange> item = class_item();
      if (peek() == '-' && i_ + 1 < end_ && p_[i_ + 1] != ']' && is_single(item)) {
        ++i_;
        const std::vector<CodeRange> hi = class_item();
        if (!is_single(hi)) fail("a class escape cannot end a range");
        if (hi[0].lo < item[0].lo) fail("character range with its end before its start");
        item[0].hi = hi[0].lo;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    ++i_;
    ranges = normalize_ranges(ranges);
    return negated ? complement_ranges(ranges) : ranges;
  }

  const std::string& p_;
  size_t i_ = 0;
  size_t end_ = 0;
};

}  // namespace

std::string regex_to_gbnf(const std::string& pattern) { return RegexParser(pattern).translate(); }

}  // namespace peregrine
