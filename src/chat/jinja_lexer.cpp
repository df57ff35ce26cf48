#include "chat/jinja_lexer.h"

#include <charconv>

#include "chat/chat_template.h"
#include "util/utf8_encode.h"

namespace peregrine::chat {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    bool strip_next_text = false;  // the previous tag ended with '-'
    bool trim_newline = false;     // the previous tag was a block or comment (trim_blocks)
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string_view text = src_.substr(pos_, tag - pos_);
      size_t text_start = pos_;
      if (strip_next_text) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.remove_prefix(k);
        text_start += k;
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        text.remove_prefix(1);
        ++text_start;
      } else if (trim_newline && text.size() >= 2 && text[0] == '\r' && text[1] == '\n') {
        text.remove_prefix(2);
        text_start += 2;
      }
      strip_next_text = trim_newline = false;
      if (tag < src_.size()) {
        char kind = src_[tag + 1];
        char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
        if (modifier == '-') {
          while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
        } else if (modifier != '+' && (kind == '%' || kind == '#')) {
          // lstrip_blocks: only whitespace between the line start and the tag is dropped.
          size_t p = tag;
          while (p > text_start && (src_[p - 1] == ' ' || src_[p - 1] == '\t')) --p;
          if (p == 0 || src_[p - 1] == '\n') text = text.substr(0, p - text_start);
        }
      }
      if (!text.empty()) push(TokenKind::Text, std::string(text), text_start);
      if (tag >= src_.size()) break;
      pos_ = tag;
      char kind = src_[tag + 1];
      bool right_strip = false;
      if (kind == '#') {
        right_strip = lex_comment();
        trim_newline = true;
      } else {
        right_strip = lex_tag(kind == '{' ? TokenKind::VarBegin : TokenKind::BlockBegin);
        trim_newline = kind == '%';
      }
      if (right_strip) {
        strip_next_text = true;
        trim_newline = false;
      }
    }
    push(TokenKind::End, "", src_.size());
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    auto [line, col] = line_col(at);
    throw ChatTemplateError("chat template:" + std::to_string(line) + ":" + std::to_string(col) +
                            ": " + what);
  }

  std::pair<int, int> line_col(size_t at) {
    // Incremental: tokens are pushed in source order, so resume from the last position.
    if (at < lc_pos_) lc_pos_ = 0, lc_line_ = 1, lc_col_ = 1;
    for (; lc_pos_ < at && lc_pos_ < src_.size(); ++lc_pos_) {
      if (src_[lc_pos_] == '\n') {
        ++lc_line_;
        lc_col_ = 1;
      } else {
        ++lc_col_;
      }
    }
    return {lc_line_, lc_col_};
  }
  std::pair<int, int> line_col(size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }

  Token& push(TokenKind kind, std::string text, size_t at) {
    auto [line, col] = line_col(at);
    tokens_.push_back(Token{kind, std::move(text), 0, 0, line, col});
    return tokens_.back();
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // At "{#": skips to "#}". Returns whether it ended with "-#}".
  bool lex_comment() {
    size_t end = src_.find("#}", pos_ + 2);
    if (end == std::string_view::npos) fail(pos_, "unterminated comment (missing '#}')");
    bool strip = end > pos_ + 2 && src_[end - 1] == '-';
    pos_ = end + 2;
    return strip;
  }

  // At "{{" or "{%": emits the begin token, the expression tokens and the end token.
  bool lex_tag(TokenKind begin) {
    size_t open = pos_;
    push(begin, begin == TokenKind::VarBegin ? "{{" : "{%", pos_);
    pos_ += 2;
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) ++pos_;
    const char close = begin == TokenKind::VarBegin ? '}' : '%';
    int brackets = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size())
        fail(open, std::string("unterminated tag (missing '") + close + "}')");
      char c = src_[pos_];
      if (c == '-' && pos_ + 2 < src_.size() && src_[pos_ + 1] == close && src_[pos_ + 2] == '}' &&
          brackets == 0) {
        push(begin == TokenKind::VarBegin ? TokenKind::VarEnd : TokenKind::BlockEnd, "", pos_);
        pos_ += 3;
        return true;
      }
      if (c == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}' && brackets == 0) {
        push(begin == TokenKind::VarBegin ? TokenKind::VarEnd : TokenKind::BlockEnd, "", pos_);
        pos_ += 2;
        return false;
      }
      if (c == '{' && pos_ + 1 < src_.size() && (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '#'))
        fail(pos_, "tag opened inside another tag");
      if (is_name_start(c)) {
        size_t start = pos_;
        while (pos_ < src_.size() && (is_name_start(src_[pos_]) || is_digit(src_[pos_]))) ++pos_;
        push(TokenKind::Name, std::string(src_.substr(start, pos_ - start)), start);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        static constexpr std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (auto t : two)
          if (src_.substr(pos_, 2) == t) op = t;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>()[]{},:.|=!").find(c) == std::string_view::npos)
            fail(pos_, std::string("unexpected character '") + c + "' in tag");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++brackets;
        if ((op == ")" || op == "]" || op == "}") && brackets > 0) --brackets;
        push(TokenKind::Op, op, pos_);
        pos_ += op.size();
      }
    }
  }

  void lex_number() {
    size_t start = pos_;
    while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && is_digit(src_[p])) {
        is_float = true;
        pos_ = p;
        while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
      }
    }
    std::string text(src_.substr(start, pos_ - start));
    Token& t = push(is_float ? TokenKind::Float : TokenKind::Int, text, start);
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      auto res = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (res.ec != std::errc()) fail(start, "integer literal out of range");
    }
  }

  void lex_string() {
    size_t start = pos_;
    char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      char e = src_[pos_++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '0': value += '\0'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          if (pos_ + digits > src_.size()) fail(pos_ - 2, "truncated \\" + std::string(1, e) + " escape");
          auto res = std::from_chars(src_.data() + pos_, src_.data() + pos_ + digits, cp, 16);
          if (res.ec != std::errc() || res.ptr != src_.data() + pos_ + digits || cp > 0x10FFFF)
            fail(pos_ - 2, "invalid \\" + std::string(1, e) + " escape");
          pos_ += digits;
          append_utf8(value, cp);
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          value += '\\';
          value += e;
      }
    }
    push(TokenKind::String, std::move(value), start);
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t lc_pos_ = 0;
  int lc_line_ = 1, lc_col_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace peregrine::chat
