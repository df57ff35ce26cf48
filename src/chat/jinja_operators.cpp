#include "chat/jinja_operators.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace peregrine::chat {

namespace {

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw EvalError("'in <string>' requires a string on the left");
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& v : container.as_list())
      if (equals(v, item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string());
  if (container.is_undefined()) return false;
  throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw EvalError("unsupported operand types for " + op + ": '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

Value repeat(const Value& seq, const Value& count, Budget& budget) {
  int64_t n = std::max<int64_t>(0, count.is_bool() ? count.as_bool() : count.as_int());
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > budget.limits().max_output_bytes / s.size())
      throw EvalError("string repetition too large");
    budget.charge_string(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const List& l = seq.as_list();
  if (!l.empty() && static_cast<uint64_t>(n) > budget.limits().max_list_items / l.size())
    throw EvalError("list repetition too large");
  budget.charge_list(l.size() * static_cast<size_t>(n));
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      budget.charge_string(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      budget.charge_list(a.as_list().size() + b.as_list().size());
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b, budget);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a, budget);
  }
  if (!a.is_number() || !b.is_number()) bad_operands(op, a, b);
  if (op == "/") {
    if (b.to_double() == 0) throw EvalError("division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (!a.is_float() && !b.is_float()) {
    int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") {
      overflow = __builtin_add_overflow(x, y, &r);
    } else if (op == "-") {
      overflow = __builtin_sub_overflow(x, y, &r);
    } else if (op == "*") {
      overflow = __builtin_mul_overflow(x, y, &r);
    } else if (op == "//" || op == "%") {
      if (y == 0) throw EvalError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) throw EvalError("integer overflow");
      int64_t q = floor_div(x, y);
      r = op == "//" ? q : x - q * y;
    } else if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      if (x == 0 || x == 1 || x == -1) {  // the loop below would not overflow, and could be long
        r = y == 0 ? 1 : x == -1 ? (y % 2 ? -1 : 1) : x;
      } else {
        r = 1;
        for (int64_t i = 0; i < y && !overflow; ++i) overflow = __builtin_mul_overflow(r, x, &r);
      }
    } else {
      bad_operands(op, a, b);
    }
    if (overflow) throw EvalError("integer overflow in '" + op + "'");
    return Value(r);
  }
  double x = a.to_double(), y = b.to_double();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) throw EvalError("float division or modulo by zero");
  if (op == "//") return Value(std::floor(x / y));
  if (op == "%") {
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  bad_operands(op, a, b);
}

}  // namespace


Value binary_operator(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "~") {
    const size_t max = budget.limits().max_output_bytes;
    std::string sa = a.str(max), sb = b.str(max);
    budget.charge_string(sa.size() + sb.size());
    return Value(sa + sb);
  }
  if (op == "==") return Value(equals(a, b));
  if (op == "!=") return Value(!equals(a, b));
  if (op == "in" || op == "not in") return Value(contains(b, a) == (op == "in"));
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    bool ok = true;
    bool result = op == "<"    ? less_than(a, b, &ok)
                  : op == ">"  ? less_than(b, a, &ok)
                  : op == "<=" ? !less_than(b, a, &ok)
                               : !less_than(a, b, &ok);
    if (!ok)
      throw EvalError("'" + op + "' not supported between '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
    return Value(result);
  }
  return arithmetic(op, a, b, budget);
}

}  // namespace peregrine::chat
