#include <cctype>

#include "grammar/gbnf.h"
#include "grammar/grammar_builder.h"
#include "util/utf8_encode.h"

namespace peregrine {
namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::vector<GbnfRule> rules() {
    std::vector<GbnfRule> out;
    skip_space(true);
    while (i_ < s_.size()) {
      out.push_back(rule());
      skip_space(true);
    }
    if (out.empty()) fail(i_, "the grammar has no rules");
    return out;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw GrammarError("grammar: " + source_position(s_, at) + ": " + what);
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return i_ + ahead < s_.size() ? s_[i_ + ahead] : '\0'; }

  // Spaces, tabs and comments; newlines too when `newlines` (inside parentheses, after `::=` or
  // `|`, between rules).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  std::string name() {
    const size_t start = i_;
    while (!at_end() && is_name_char(peek())) ++i_;
    if (i_ == start) fail(start, "expected a rule name");
    return std::string(s_.substr(start, i_ - start));
  }

  GbnfRule rule() {
    GbnfRule r;
    r.offset = i_;
    r.name = name();
    skip_space(false);
    if (s_.substr(i_, 3) != "::=") fail(i_, "expected '::=' after the rule name '" + r.name + "'");
    i_ += 3;
    skip_space(true);
    r.body = alternatives(0);
    if (!at_end() && peek() != '\n' && peek() != '\r') {
      fail(i_, peek() == ')' ? "unbalanced ')'" : "unexpected '" + std::string(1, peek()) + "'");
    }
    return r;
  }

  // A line break ends a top-level sequence; a `|` at the start of the next line continues it.
  bool continues_on_next_line() {
    size_t j = i_;
    while (j < s_.size()) {
      const char c = s_[j];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++j;
      } else if (c == '#') {
        while (j < s_.size() && s_[j] != '\n') ++j;
      } else {
        break;
      }
    }
    if (j < s_.size() && s_[j] == '|') {
      i_ = j;
      return true;
    }
    return false;
  }

  GbnfNode alternatives(size_t depth) {
    GbnfNode choice;
    choice.kind = GbnfNode::Kind::Choice;
    choice.offset = i_;
    choice.items.push_back(sequence(depth));
    while (peek() == '|' || (depth == 0 && (peek() == '\n' || peek() == '\r') && continues_on_next_line())) {
      ++i_;
      skip_space(true);
      choice.items.push_back(sequence(depth));
    }
    return choice;
  }

  GbnfNode sequence(size_t depth) {
    GbnfNode seq;
    seq.kind = GbnfNode::Kind::Sequence;
    seq.offset = i_;
    while (!at_end()) {
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      if (is_name_char(c) && starts_rule_definition()) break;
      seq.items.push_back(postfixed(depth));
      skip_space(depth > 0);
    }
    return seq;
  }

  // `name ::=` ahead: the previous rule has ended (only reachable inside parentheses, where a
  // missing ')' is the problem).
  bool starts_rule_definition() const {
    size_t j = i_;
    while (j < s_.size() && is_name_char(s_[j])) ++j;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\n' || s_[j] == '\r')) ++j;
    return s_.substr(j, 3) == "::=";
  }

  GbnfNode postfixed(size_t depth) {
    GbnfNode node = primary(depth);
    while (!at_end()) {
      const char c = peek();
      uint32_t min = 0;
      uint32_t max = kUnbounded;
      const size_t at = i_;
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{') {
        braces(min, max);
      } else {
        break;
      }
      GbnfNode rep;
      rep.kind = GbnfNode::Kind::Repeat;
      rep.offset = at;
      rep.min = min;
      rep.max = max;
      rep.items.push_back(std::move(node));
      node = std::move(rep);
    }
    return node;
  }

  uint32_t number() {
    const size_t start = i_;
    uint64_t v = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(peek())) != 0) {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kMaxRepetition) fail(start, "repetition bound above " + std::to_string(kMaxRepetition));
      ++i_;
    }
    return static_cast<uint32_t>(v);
  }

  // {m} {m,} {m,n} {,n}
  void braces(uint32_t& min, uint32_t& max) {
    const size_t start = i_++;
    skip_space(false);
    const bool has_min = std::isdigit(static_cast<unsigned char>(peek())) != 0;
    min = has_min ? number() : 0;
    skip_space(false);
    if (peek() == ',') {
      ++i_;
      skip_space(false);
      max = std::isdigit(static_cast<unsigned char>(peek())) != 0 ? number() : kUnbounded;
    } else {
      if (!has_min) fail(start, "expected a number in '{...}'");
      max = min;
    }
    skip_space(false);
    if (peek() != '}') fail(i_, "expected '}' to close the repetition");
    ++i_;
    if (max != kUnbounded && max < min) fail(start, "repetition {m,n} with n < m");
  }

  GbnfNode primary(size_t depth) {
    GbnfNode node;
    node.offset = i_;
    const char c = peek();
    if (c == '"') {
      node.kind = GbnfNode::Kind::Literal;
      node.text = literal();
    } else if (c == '[') {
      node.kind = GbnfNode::Kind::Class;
      node.ranges = char_class();
    } else if (c == '.') {
      ++i_;
      node.kind = GbnfNode::Kind::Class;
      node.ranges = complement_ranges({});
    } else if (c == '(') {
      if (depth + 1 > kMaxGrammarNesting)
        fail(i_, "parentheses nested more than " + std::to_string(kMaxGrammarNesting) + " deep");
      ++i_;
      skip_space(true);
      node = alternatives(depth + 1);
      skip_space(true);
      if (peek() != ')') fail(i_, at_end() ? "missing ')' at the end of the grammar" : "expected ')'");
      ++i_;
    } else if (is_name_char(c)) {
      node.kind = GbnfNode::Kind::Ref;
      node.text = name();
    } else if (c == '<') {
      fail(i_, "token references (<...>) are not supported");
    } else {
      fail(i_, "expected a literal, a character class, a rule name or '(' but found '" + std::string(1, c) + "'");
    }
    return node;
  }

  // One code point of the source at i_ (UTF-8 decoded), or an escape sequence.
  uint32_t character() {
    const size_t at = i_;
    const auto b = static_cast<unsigned char>(peek());
    if (b == '\\') return escape();
    // Strictly UTF-8: an overlong form, a surrogate or a code point past U+10FFFF would be written
    // out as bytes that are not UTF-8 (fuzz_gbnf found "\xED\xA0\x80" in a literal taken as U+D800).
    const DecodedCodePoint d = decode_utf8(s_, i_);
    if (d.length == 0) fail(at, "invalid UTF-8 in the grammar");
    i_ += d.length;
    return d.cp;
  }

  uint32_t escape() {
    const size_t at = i_;
    ++i_;  // the backslash
    if (at_end()) fail(at, "escape at the end of the grammar");
    const char c = s_[i_++];
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return static_cast<uint32_t>(c);
      case 'x':
        return hex_digits(2, at);
      case 'u':
        return hex_digits(4, at);
      case 'U':
        return hex_digits(8, at);
      default:
        fail(at, std::string("unknown escape '\\") + c + "'");
    }
  }

  uint32_t hex_digits(size_t n, size_t at) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const int h = hex_value(peek());
      if (h < 0) fail(at, "escape needs " + std::to_string(n) + " hex digits");
      v = v * 16 + static_cast<uint64_t>(h);
      ++i_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail(at, "escape is not a Unicode scalar value");
    return static_cast<uint32_t>(v);
  }

  std::string literal() {
    const size_t start = i_++;
    std::string out;
    while (true) {
      if (at_end() || peek() == '\n') fail(start, "unterminated string literal");
      if (peek() == '"') break;
      out += encode_utf8(character());
    }
    ++i_;
    return out;
  }

  std::vector<CodeRange> char_class() {
    const size_t start = i_++;
    const bool negated = peek() == '^';
    if (negated) ++i_;
    std::vector<CodeRange> ranges;
    while (true) {
      if (at_end() || peek() == '\n') fail(start, "unterminated character class");
      if (peek() == ']') break;
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
        ++i_;
        const size_t range_at = i_;
        hi = character();
        if (hi < lo) fail(range_at, "character range with its end before its start");
      }
      ranges.push_back({lo, hi});
    }
    ++i_;
    ranges = normalize_ranges(std::move(ranges));
    if (negated) ranges = complement_ranges(ranges);
    if (ranges.empty()) fail(start, "character class matches nothing");
    return ranges;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::string source_position(std::string_view text, size_t offset) {
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::vector<GbnfRule> parse_gbnf(std::string_view text) { return Parser(text).rules(); }

Grammar compile_gbnf(std::string_view text) { return build_grammar(parse_gbnf(text), text, "root"); }

}  // namespace peregrine
