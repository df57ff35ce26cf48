#pragma once
// The parsed form of a template: statements (text, output, if, for, set, ...) holding expression
// trees. Built once by parse_template(), then only read (a ChatTemplate is shared by copies and
// rendered from many threads).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace peregrine::chat {

struct Pos {
  int line = 1;
  int column = 1;
};

enum class ExprKind {
  Literal,   // value
  Name,      // name
  List,      // children = items
  Dict,      // keys (children, even) and values (odd)
  Attr,      // children[0].name
  Index,     // children[0][children[1]]
  Slice,     // children[0][children[1]:children[2]:children[3]] (null = omitted)
  Call,      // children[0](args, kwargs)
  Filter,    // children[0] | name(args, kwargs)
  Test,      // children[0] is [not] name(args)
  Unary,     // op in {"-", "+", "not"} children[0]
  Binary,    // children[0] op children[1]; op in + - * / // % ~ and or in "not in" == != < <= > >=
  IfElse,    // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind;
  Pos pos;
  Value value;           // Literal
  std::string name;      // Name, Attr, Filter, Test; op for Unary and Binary
  bool negated = false;  // Test: "is not"
  int height = 1;        // longest path to a leaf; bounded so evaluation cannot overflow the stack
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,      // text
  Output,    // {{ expr }}
  If,        // branches: (condition, body)...; else_body
  For,       // for targets in expr [if filter] body [else else_body]
  Set,       // set targets = expr, or set target.attr = expr (attr non-empty)
  SetBlock,  // {% set target %}body{% endset %}
  Break,
  Continue,
};

struct Stmt {
  StmtKind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;                      // For: inline `if` condition
  std::vector<std::string> targets;    // For / Set: assigned names (several = tuple unpacking)
  std::string attr;                    // Set: namespace attribute
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;                           // For, SetBlock
  Body else_body;                      // If, For
};

struct Template {
  std::string source;
  Body body;
};

// Parses a whole template. Throws ChatTemplateError "chat template:LINE:COL: ..." on a syntax
// error or when the template nests deeper than the parser allows.
std::shared_ptr<Template> parse_template(std::string source);

}  // namespace peregrine::chat
