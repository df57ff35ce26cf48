// Recursive-descent parser for the Jinja subset, following Jinja2's own grammar and precedence
// (lowest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, primary with postfix `.attr` `[index]` `[a:b:c]` `(call)`, then `|filter` and
// `is test`. So `a + b | trim` is `a + (b | trim)` and `not x is defined` is `not (x is defined)`.
#include <algorithm>
#include <initializer_list>

#include "chat/chat_template.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace peregrine::chat {

namespace {

// Deep enough for every real template (they nest ~6 blocks and ~10 expression levels), shallow
// enough that a hostile one cannot exhaust the stack of the parser or of the evaluator, whose
// recursion follows the tree.
constexpr int kMaxDepth = 100;
constexpr int kMaxHeight = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_all() {
    std::string end_tag;
    Body body = parse_body({}, &end_tag);
    return body;
  }

 private:
  // ---- helpers ----
  const Token& peek(size_t ahead = 0) const {
    size_t i = std::min(i_ + ahead, toks_.size() - 1);
    return toks_[i];
  }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  static Pos pos_of(const Token& t) { return Pos{t.line, t.column}; }
  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    throw ChatTemplateError("chat template:" + std::to_string(t.line) + ":" +
                            std::to_string(t.column) + ": " + what);
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::Text: return "text";
      case TokenKind::VarBegin: return "'{{'";
      case TokenKind::VarEnd: return "'}}'";
      case TokenKind::BlockBegin: return "'{%'";
      case TokenKind::BlockEnd: return "'%}'";
      case TokenKind::Name: return "'" + t.text + "'";
      case TokenKind::String: return "string literal";
      case TokenKind::Int:
      case TokenKind::Float: return "number " + t.text;
      case TokenKind::Op: return "'" + t.text + "'";
      case TokenKind::End: return "end of template";
    }
    return "token";
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.kind == TokenKind::Op && t.text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.kind == TokenKind::Name && t.text == name;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  void expect_name(const char* name) {
    if (!is_name(name)) fail(peek(), std::string("expected '") + name + "', got " + describe(peek()));
    next();
  }
  std::string expect_identifier() {
    if (peek().kind != TokenKind::Name) fail(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::BlockEnd) fail(peek(), "expected '%}', got " + describe(peek()));
    next();
  }

  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(at, "template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Records the node's height and rejects trees taller than the evaluator may recurse: chains
  // like a.b.c... or a+b+c+... are built by loops, not by recursion, so the depth guard alone
  // does not bound them.
  ExprPtr sealed(ExprPtr e) {
    int h = 0;
    for (const auto& c : e->children)
      if (c) h = std::max(h, c->height);
    for (const auto& c : e->args) h = std::max(h, c->height);
    for (const auto& kv : e->kwargs) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > kMaxHeight)
      throw ChatTemplateError("chat template:" + std::to_string(e->pos.line) + ":" +
                              std::to_string(e->pos.column) + ": expression nests too deeply");
    return e;
  }

  ExprPtr make(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos_of(at);
    return e;
  }

  // ---- statements ----

  // Parses statements until one of `end_tags` opens a block tag; consumes "{% tag" and stores
  // the tag in *end_tag. With no end tags, parses to the end of the template.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string* end_tag) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::End) {
        if (end_tags.size() == 0) return body;
        std::string list;
        for (const char* e : end_tags) list += (list.empty() ? "'" : " or '") + std::string(e) + "'";
        fail(t, "unexpected end of template, expected " + list);
      }
      if (t.kind == TokenKind::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->pos = pos_of(t);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->pos = pos_of(t);
        s->expr = parse_expression();
        if (peek().kind != TokenKind::VarEnd) fail(peek(), "expected '}}', got " + describe(peek()));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::BlockBegin) {
        next();
        const Token& kw = peek();
        if (kw.kind != TokenKind::Name) fail(kw, "expected a tag name, got " + describe(kw));
        for (const char* e : end_tags) {
          if (kw.text == e) {
            *end_tag = next().text;
            return body;
          }
        }
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& kw = next();
    DepthGuard guard(*this, kw);
    auto s = std::make_unique<Stmt>();
    s->pos = pos_of(kw);
    if (kw.text == "if") {
      s->kind = StmtKind::If;
      std::string tag = "elif";
      while (tag == "elif") {
        ExprPtr cond = parse_expression();
        expect_block_end();
        Body branch = parse_body({"elif", "else", "endif"}, &tag);
        s->branches.emplace_back(std::move(cond), std::move(branch));
      }
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &tag);
      }
      expect_block_end();
    } else if (kw.text == "for") {
      s->kind = StmtKind::For;
      s->targets.push_back(expect_identifier());
      while (is_op(",")) {
        next();
        s->targets.push_back(expect_identifier());
      }
      expect_name("in");
      s->expr = parse_or();
      if (is_name("if")) {
        next();
        s->filter = parse_or();
      }
      if (is_name("recursive")) fail(peek(), "recursive loops are not supported");
      expect_block_end();
      std::string tag;
      s->body = parse_body({"else", "endfor"}, &tag);
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &tag);
      }
      expect_block_end();
    } else if (kw.text == "set") {
      s->targets.push_back(expect_identifier());
      if (is_op(".")) {
        next();
        s->attr = expect_identifier();
      } else {
        while (is_op(",")) {
          next();
          s->targets.push_back(expect_identifier());
        }
      }
      if (is_op("=")) {
        next();
        s->kind = StmtKind::Set;
        s->expr = parse_expression();
        if (is_op(",")) fail(peek(), "tuple assignment values are not supported; use a list");
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) fail(peek(), "expected '='");
        s->kind = StmtKind::SetBlock;
        expect_block_end();
        std::string tag;
        s->body = parse_body({"endset"}, &tag);
        expect_block_end();
      }
    } else if (kw.text == "break" || kw.text == "continue") {
      s->kind = kw.text == "break" ? StmtKind::Break : StmtKind::Continue;
      expect_block_end();
    } else {
      static constexpr const char* kUnsupported[] = {"macro", "call",    "filter", "raw",
                                                     "include", "import", "from",  "extends",
                                                     "block",  "with",    "generation", "do"};
      for (const char* u : kUnsupported)
        if (kw.text == u) fail(kw, "'" + kw.text + "' blocks are not supported in chat templates");
      fail(kw, "unknown tag '" + kw.text + "'");
    }
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_expression() {
    DepthGuard guard(*this, peek());
    const Token& at = peek();
    ExprPtr value = parse_or();
    if (!is_name("if")) return value;
    next();
    auto e = make(ExprKind::IfElse, at);
    ExprPtr cond = parse_or();
    ExprPtr otherwise;
    if (is_name("else")) {
      next();
      otherwise = parse_expression();
    }
    e->children.push_back(std::move(cond));
    e->children.push_back(std::move(value));
    e->children.push_back(std::move(otherwise));
    return sealed(std::move(e));
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr lhs, ExprPtr rhs) {
    auto e = make(ExprKind::Binary, at);
    e->name = std::move(op);
    e->children.push_back(std::move(lhs));
    e->children.push_back(std::move(rhs));
    return sealed(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr lhs = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      lhs = binary(at, "or", std::move(lhs), parse_and());
    }
    return lhs;
  }

  ExprPtr parse_and() {
    ExprPtr lhs = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      lhs = binary(at, "and", std::move(lhs), parse_not());
    }
    return lhs;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      DepthGuard guard(*this, at);
      auto e = make(ExprKind::Unary, at);
      e->name = "not";
      e->children.push_back(parse_not());
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr lhs = parse_math1();
    while (true) {
      const Token& t = peek();
      std::string op;
      if (t.kind == TokenKind::Op &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" ||
           t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        return lhs;
      }
      lhs = binary(t, op, std::move(lhs), parse_math1());
    }
  }

  ExprPtr parse_math1() {
    ExprPtr lhs = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      lhs = binary(at, at.text, std::move(lhs), parse_concat());
    }
    return lhs;
  }

  ExprPtr parse_concat() {
    ExprPtr lhs = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      lhs = binary(at, "~", std::move(lhs), parse_math2());
    }
    return lhs;
  }

  ExprPtr parse_math2() {
    ExprPtr lhs = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      lhs = binary(at, at.text, std::move(lhs), parse_pow());
    }
    return lhs;
  }

  ExprPtr parse_pow() {
    ExprPtr lhs = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      lhs = binary(at, "**", std::move(lhs), parse_unary(true));
    }
    return lhs;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Token& at = peek();
    DepthGuard guard(*this, at);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      next();
      e = make(ExprKind::Unary, at);
      e->name = at.text;
      e->children.push_back(parse_unary(false));
      e = sealed(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.kind == TokenKind::Name) {
      next();
      auto e = make(ExprKind::Literal, t);
      if (t.text == "true" || t.text == "True") {
        e->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value(None{});
      } else {
        e->kind = ExprKind::Name;
        e->name = t.text;
      }
      return e;
    }
    if (t.kind == TokenKind::String) {
      std::string s = next().text;
      while (peek().kind == TokenKind::String) s += next().text;  // "a" "b" concatenates
      auto e = make(ExprKind::Literal, t);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::Int || t.kind == TokenKind::Float) {
      next();
      auto e = make(ExprKind::Literal, t);
      e->value = t.kind == TokenKind::Int ? Value(t.int_value) : Value(t.float_value);
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {  // empty tuple
        next();
        auto e = make(ExprKind::List, t);
        return e;
      }
      ExprPtr inner = parse_expression();
      if (is_op(",")) {  // a tuple: behaves like a list here
        auto e = make(ExprKind::List, t);
        e->children.push_back(std::move(inner));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          e->children.push_back(parse_expression());
        }
        inner = sealed(std::move(e));
      }
      expect_op(")");
      return inner;
    }
    if (is_op("[")) {
      next();
      auto e = make(ExprKind::List, t);
      while (!is_op("]")) {
        e->children.push_back(parse_expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
      return sealed(std::move(e));
    }
    if (is_op("{")) {
      next();
      auto e = make(ExprKind::Dict, t);
      while (!is_op("}")) {
        e->children.push_back(parse_expression());
        expect_op(":");
        e->children.push_back(parse_expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
      return sealed(std::move(e));
    }
    fail(t, "unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& t = peek();
      if (is_op(".")) {
        next();
        auto a = make(ExprKind::Attr, t);
        if (peek().kind == TokenKind::Int) {  // foo.0 is foo[0] in Jinja
          auto idx = make(ExprKind::Literal, peek());
          idx->value = Value(next().int_value);
          a->kind = ExprKind::Index;
          a->children.push_back(std::move(e));
          a->children.push_back(std::move(idx));
        } else {
          a->name = expect_identifier();
          a->children.push_back(std::move(e));
        }
        e = sealed(std::move(a));
      } else if (is_op("[")) {
        next();
        e = sealed(parse_subscript(t, std::move(e)));
      } else if (is_op("(")) {
        next();
        auto c = make(ExprKind::Call, t);
        c->children.push_back(std::move(e));
        parse_call_args(*c);
        e = sealed(std::move(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(const Token& at, ExprPtr target) {
    ExprPtr parts[3];
    int colons = 0;
    while (true) {
      if (is_op("]")) break;
      if (is_op(":")) {
        if (++colons > 2) fail(peek(), "too many ':' in slice");
        next();
        continue;
      }
      if (parts[colons]) fail(peek(), "expected ':' or ']' in subscript");
      parts[colons] = parse_expression();
    }
    expect_op("]");
    if (colons == 0) {
      if (!parts[0]) fail(at, "empty subscript");
      auto e = make(ExprKind::Index, at);
      e->children.push_back(std::move(target));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(ExprKind::Slice, at);
    e->children.push_back(std::move(target));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  // After '(' : positional and keyword arguments up to ')'.
  void parse_call_args(Expr& call) {
    while (!is_op(")")) {
      if (peek().kind == TokenKind::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail(peek(), "positional argument after keyword argument");
        call.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      const Token& t = peek();
      if (is_op("|")) {
        next();
        auto f = make(ExprKind::Filter, t);
        f->name = expect_identifier();
        f->children.push_back(std::move(e));
        if (is_op("(")) {
          next();
          parse_call_args(*f);
        }
        e = sealed(std::move(f));
      } else if (is_name("is")) {
        next();
        auto test = make(ExprKind::Test, t);
        if (is_name("not")) {
          next();
          test->negated = true;
        }
        test->name = expect_identifier();
        test->children.push_back(std::move(e));
        if (is_op("(")) {
          next();
          parse_call_args(*test);
        } else if (test_takes_bare_argument()) {
          test->args.push_back(parse_postfix(parse_primary()));
        }
        e = sealed(std::move(test));
      } else {
        return e;
      }
    }
  }

  // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
  bool test_takes_bare_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::String || t.kind == TokenKind::Int || t.kind == TokenKind::Float)
      return true;
    if (t.kind == TokenKind::Op) return t.text == "[" || t.text == "{";
    if (t.kind != TokenKind::Name) return false;
    for (const char* kw : {"else", "or", "and", "if", "in", "not", "is"})
      if (t.text == kw) return false;
    return true;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<Template> parse_template(std::string source) {
  auto tmpl = std::make_shared<Template>();
  Parser parser(tokenize(source));
  tmpl->body = parser.parse_all();
  tmpl->source = std::move(source);
  return tmpl;
}

}  // namespace peregrine::chat
