#include "chat/jinja_eval.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "chat/chat_template.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"

namespace peregrine::chat {

void Budget::charge_string(size_t n) {
  if (n > limits_.max_output_bytes)
    throw EvalError("string of " + std::to_string(n) + " bytes exceeds the limit of " +
                    std::to_string(limits_.max_output_bytes));
  created_ += n;
  if (created_ > limits_.max_created_bytes)
    throw EvalError("template built more than " + std::to_string(limits_.max_created_bytes) +
                    " bytes of values");
}

void Budget::charge_list(size_t n) {
  if (n > limits_.max_list_items)
    throw EvalError("list of " + std::to_string(n) + " items exceeds the limit of " +
                    std::to_string(limits_.max_list_items));
  created_ += n * sizeof(Value);
  if (created_ > limits_.max_created_bytes)
    throw EvalError("template built more than " + std::to_string(limits_.max_created_bytes) +
                    " bytes of values");
}

namespace {

// raise_exception("...") from the template: its message reaches the caller unchanged.
struct TemplateRaised {
  std::string message;
};

enum class Flow { Normal, Break, Continue };

// Deepest nesting of lists/dicts in a value, counted up to `limit` + 1. Also reports whether
// `target` (a namespace being assigned to) occurs inside, which would make a reference cycle.
int nesting(const Value& v, int limit, const Dict* target, bool* cycle) {
  if (limit < 0) return 1;
  if (v.is_list()) {
    int d = 0;
    for (const auto& item : v.as_list()) d = std::max(d, nesting(item, limit - 1, target, cycle));
    return d + 1;
  }
  if (v.is_dict()) {
    if (&v.as_dict() == target) *cycle = true;
    int d = 0;
    for (const auto& kv : v.as_dict().items)
      d = std::max(d, nesting(kv.second, limit - 1, target, cycle));
    return d + 1;
  }
  return 0;
}

bool is_global_function(const std::string& name) {
  return name == "raise_exception" || name == "range" || name == "namespace" || name == "dict" ||
         name == "strftime_now";
}

// Values are printed, compared and freed recursively, so their nesting is bounded too.
constexpr int kMaxValueNesting = 64;

void check_nesting(const Value& v, const Dict* target = nullptr) {
  bool cycle = false;
  if (nesting(v, kMaxValueNesting, target, &cycle) > kMaxValueNesting)
    throw EvalError("value nests more than " + std::to_string(kMaxValueNesting) + " levels deep");
  if (cycle) throw EvalError("a namespace cannot contain itself");
}

class Renderer {
 public:
  Renderer(const Template& tmpl, const Dict& context, const RenderOptions& options)
      : tmpl_(tmpl), context_(context), options_(options), budget_(options.limits) {}

  std::string run() {
    scopes_.emplace_back();
    out_ = &result_;
    if (exec_body(tmpl_.body) != Flow::Normal)
      throw ChatTemplateError("chat template: 'break' or 'continue' outside a loop");
    return std::move(result_);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  [[noreturn]] void fail_at(const Pos& pos, const std::string& what) const {
    throw ChatTemplateError("chat template:" + std::to_string(pos.line) + ":" +
                            std::to_string(pos.column) + ": " + what);
  }

  void emit(std::string_view s) {
    if (s.size() > options_.limits.max_output_bytes - out_->size())
      throw EvalError("rendered text exceeds " + std::to_string(options_.limits.max_output_bytes) +
                      " bytes");
    out_->append(s);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    if (const Value* v = context_.find(name)) return *v;
    return Value();
  }

  // ---- statements ----

  Flow exec_body(const Body& body) {
    for (const auto& stmt : body) {
      Flow f = exec(*stmt);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s) {
    try {
      budget_.step();
      switch (s.kind) {
        case StmtKind::Text: emit(s.text); return Flow::Normal;
        case StmtKind::Output: {
          Value v = eval(*s.expr);
          emit(v.str(options_.limits.max_output_bytes));
          return Flow::Normal;
        }
        case StmtKind::If:
          for (const auto& [cond, body] : s.branches)
            if (eval(*cond).truthy()) return exec_body(body);
          return exec_body(s.else_body);
        case StmtKind::For: return exec_for(s);
        case StmtKind::Set: assign(s, eval(*s.expr)); return Flow::Normal;
        case StmtKind::SetBlock: {
          std::string captured;
          std::string* saved = out_;
          out_ = &captured;
          Flow f = exec_body(s.body);
          out_ = saved;
          if (f != Flow::Normal) throw EvalError("'break' or 'continue' inside a set block");
          assign(s, Value(std::move(captured)));
          return Flow::Normal;
        }
        case StmtKind::Break: return Flow::Break;
        case StmtKind::Continue: return Flow::Continue;
      }
    } catch (const EvalError& e) {
      fail_at(s.pos, e.what());
    } catch (const std::length_error&) {
      fail_at(s.pos, "value too large to print");
    }
    return Flow::Normal;
  }

  void assign(const Stmt& s, Value value) {
    if (!s.attr.empty()) {
      Value target = lookup(s.targets[0]);
      if (!target.is_dict() || !target.as_dict().is_namespace)
        throw EvalError("cannot set attribute '" + s.attr + "' on '" + s.targets[0] +
                        "': it is not a namespace()");
      check_nesting(value, &target.as_dict());
      target.mutable_dict().set(s.attr, std::move(value));
      return;
    }
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = std::move(value);
      return;
    }
    if (!value.is_list() || value.as_list().size() != s.targets.size())
      throw EvalError("cannot unpack " + value.type_name() + " into " +
                      std::to_string(s.targets.size()) + " names");
    for (size_t i = 0; i < s.targets.size(); ++i) scopes_.back()[s.targets[i]] = value.as_list()[i];
  }

  List iterate(const Value& v) {
    if (v.is_list()) return v.as_list();
    if (v.is_undefined()) return {};
    if (v.is_dict()) {
      List keys;
      for (const auto& kv : v.as_dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    if (v.is_string()) {
      List chars;
      for (auto c : utf8_chars(v.as_string())) chars.emplace_back(c);
      return chars;
    }
    throw EvalError("'" + v.type_name() + "' object is not iterable");
  }

  void bind_targets(const Stmt& s, Scope& scope, const Value& item) {
    if (s.targets.size() == 1) {
      scope[s.targets[0]] = item;
      return;
    }
    if (!item.is_list() || item.as_list().size() != s.targets.size())
      throw EvalError("cannot unpack " + item.type_name() + " into " +
                      std::to_string(s.targets.size()) + " loop variables");
    for (size_t i = 0; i < s.targets.size(); ++i) scope[s.targets[i]] = item.as_list()[i];
  }

  Flow exec_for(const Stmt& s) {
    List all = iterate(eval(*s.expr));
    List items;
    if (s.filter) {
      for (const auto& item : all) {
        budget_.step();
        scopes_.emplace_back();
        bind_targets(s, scopes_.back(), item);
        bool keep = eval(*s.filter).truthy();
        scopes_.pop_back();
        if (keep) items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) return exec_body(s.else_body);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Dict loop;
      loop.items = {{"index", Value(i + 1)},
                    {"index0", Value(i)},
                    {"revindex", Value(n - i)},
                    {"revindex0", Value(n - i - 1)},
                    {"first", Value(i == 0)},
                    {"last", Value(i == n - 1)},
                    {"length", Value(n)},
                    {"previtem", i > 0 ? items[i - 1] : Value()},
                    {"nextitem", i + 1 < n ? items[i + 1] : Value()}};
      // Each iteration gets a fresh scope: a plain `set` in the body does not outlive it (use a
      // namespace for that), as in Jinja.
      scopes_.emplace_back();
      scopes_.back()["loop"] = Value(std::move(loop));
      bind_targets(s, scopes_.back(), items[i]);
      Flow f = exec_body(s.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // ---- expressions ----

  Value eval(const Expr& e) {
    budget_.step();
    try {
      return eval_node(e);
    } catch (const EvalError& err) {
      fail_at(e.pos, err.what());
    } catch (const std::length_error&) {
      fail_at(e.pos, "value too large");
    }
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Literal: return e.value;
      case ExprKind::Name: return lookup(e.name);
      case ExprKind::List: {
        budget_.charge_list(e.children.size());
        List items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        Value v(std::move(items));
        check_nesting(v);
        return v;
      }
      case ExprKind::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value key = eval(*e.children[i]);
          if (!key.is_string()) throw EvalError("dict keys must be strings here");
          d.set(key.as_string(), eval(*e.children[i + 1]));
        }
        budget_.charge_list(d.items.size());
        Value v(std::move(d));
        check_nesting(v);
        return v;
      }
      case ExprKind::Attr: {
        Value obj = eval(*e.children[0]);
        if (obj.is_dict())
          if (const Value* v = obj.as_dict().find(e.name)) return *v;
        return Value();  // like Jinja, a missing attribute is undefined
      }
      case ExprKind::Index: return index(eval(*e.children[0]), eval(*e.children[1]));
      case ExprKind::Slice: return slice(e);
      case ExprKind::Call: return call(e);
      case ExprKind::Filter: {
        Value subject = eval(*e.children[0]);
        std::vector<Value> args;
        Kwargs kwargs;
        eval_args(e, &args, &kwargs);
        Value v = apply_filter(e.name, subject, args, kwargs, budget_);
        check_nesting(v);
        return v;
      }
      case ExprKind::Test: {
        // Global functions are defined (Llama 3.2 asks `strftime_now is defined`), although
        // they are not values here.
        const Expr& target = *e.children[0];
        if (target.kind == ExprKind::Name && is_global_function(target.name) &&
            lookup(target.name).is_undefined() &&
            (e.name == "defined" || e.name == "undefined" || e.name == "callable"))
          return Value((e.name != "undefined") != e.negated);
        Value subject = eval(*e.children[0]);
        std::vector<Value> args;
        Kwargs kwargs;
        eval_args(e, &args, &kwargs);
        return Value(apply_test(e.name, subject, args) != e.negated);
      }
      case ExprKind::Unary: {
        Value v = eval(*e.children[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_int()) {
          if (e.name == "-" && v.as_int() == INT64_MIN) throw EvalError("integer overflow");
          return e.name == "-" ? Value(-v.as_int()) : v;
        }
        if (v.is_float()) return e.name == "-" ? Value(-v.as_float()) : v;
        if (v.is_bool()) return Value(int64_t{e.name == "-" ? -int64_t{v.as_bool()} : v.as_bool()});
        throw EvalError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      }
      case ExprKind::Binary: return binary(e);
      case ExprKind::IfElse:
        if (eval(*e.children[0]).truthy()) return eval(*e.children[1]);
        return e.children[2] ? eval(*e.children[2]) : Value();
    }
    return Value();
  }

  void eval_args(const Expr& e, std::vector<Value>* args, Kwargs* kwargs) {
    for (const auto& a : e.args) args->push_back(eval(*a));
    for (const auto& [k, v] : e.kwargs) kwargs->emplace_back(k, eval(*v));
  }

  static int64_t normalize_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

  Value index(const Value& obj, const Value& key) {
    if (obj.is_dict()) {
      if (!key.is_string()) return Value();
      const Value* v = obj.as_dict().find(key.as_string());
      return v ? *v : Value();
    }
    if (!key.is_int()) return Value();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.as_list().size());
      int64_t i = normalize_index(key.as_int(), n);
      return i >= 0 && i < n ? obj.as_list()[static_cast<size_t>(i)] : Value();
    }
    if (obj.is_string()) {
      auto chars = utf8_chars(obj.as_string());
      int64_t n = static_cast<int64_t>(chars.size());
      int64_t i = normalize_index(key.as_int(), n);
      return i >= 0 && i < n ? Value(chars[static_cast<size_t>(i)]) : Value();
    }
    return Value();
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.children[0]);
    auto bound = [&](const ExprPtr& p) -> std::optional<int64_t> {
      if (!p) return std::nullopt;
      Value v = eval(*p);
      if (v.is_none()) return std::nullopt;
      if (!v.is_int()) throw EvalError("slice indices must be integers");
      return v.as_int();
    };
    std::optional<int64_t> start = bound(e.children[1]), stop = bound(e.children[2]),
                           step_opt = bound(e.children[3]);
    int64_t step = step_opt.value_or(1);
    if (step == 0) throw EvalError("slice step cannot be zero");
    std::vector<std::string_view> chars;
    int64_t n;
    if (obj.is_list()) {
      n = static_cast<int64_t>(obj.as_list().size());
    } else if (obj.is_string()) {
      chars = utf8_chars(obj.as_string());
      n = static_cast<int64_t>(chars.size());
    } else if (obj.is_undefined()) {
      return Value();
    } else {
      throw EvalError("'" + obj.type_name() + "' object cannot be sliced");
    }
    // Python's slice.indices().
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + n : *v;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t lo = clamp(start, step > 0 ? 0 : n - 1);
    int64_t hi = clamp(stop, step > 0 ? n : -1);
    List items;
    std::string text;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (obj.is_list()) {
        items.push_back(obj.as_list()[static_cast<size_t>(i)]);
      } else {
        text.append(chars[static_cast<size_t>(i)]);
      }
    }
    if (obj.is_list()) {
      budget_.charge_list(items.size());
      return Value(std::move(items));
    }
    budget_.charge_string(text.size());
    return Value(std::move(text));
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.children[0];
    std::vector<Value> args;
    Kwargs kwargs;
    if (callee.kind == ExprKind::Attr) {
      Value obj = eval(*callee.children[0]);
      eval_args(e, &args, &kwargs);
      return call_method(obj, callee.name, args, kwargs, budget_);
    }
    if (callee.kind != ExprKind::Name || !lookup(callee.name).is_undefined())
      throw EvalError("this expression is not callable");
    eval_args(e, &args, &kwargs);
    const std::string& fn = callee.name;
    if (fn == "raise_exception") {
      throw TemplateRaised{args.empty() ? std::string("raise_exception() called") : args[0].str()};
    }
    if (fn == "range") return range(args);
    if (fn == "namespace" || fn == "dict") {
      Dict d;
      d.is_namespace = fn == "namespace";
      if (!args.empty()) {
        if (args.size() > 1 || !args[0].is_dict()) throw EvalError(fn + "() takes keyword arguments");
        d.items = args[0].as_dict().items;
      }
      for (auto& [k, v] : kwargs) d.set(k, v);
      budget_.charge_list(d.items.size());
      Value v(std::move(d));
      check_nesting(v);
      return v;
    }
    if (fn == "strftime_now") {
      if (args.size() != 1 || !args[0].is_string()) throw EvalError("strftime_now(format) takes a string");
      if (args[0].as_string().size() > 256) throw EvalError("strftime_now format too long");
      std::time_t t = options_.now ? *options_.now : std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[1024];
      size_t len = std::strftime(buf, sizeof buf, args[0].as_string().c_str(), &tm);
      return Value(std::string(buf, len));
    }
    throw EvalError("unknown function '" + fn + "'");
  }

  Value range(const std::vector<Value>& args) {
    if (args.empty() || args.size() > 3) throw EvalError("range() takes 1 to 3 integers");
    for (const auto& a : args)
      if (!a.is_int()) throw EvalError("range() takes integers");
    int64_t start = 0, stop, step = 1;
    if (args.size() == 1) {
      stop = args[0].as_int();
    } else {
      start = args[0].as_int();
      stop = args[1].as_int();
      if (args.size() == 3) step = args[2].as_int();
    }
    if (step == 0) throw EvalError("range() step must not be zero");
    // Count first (in double to dodge overflow) so a huge range fails before allocating.
    double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    if (count < 0) count = 0;
    if (count > static_cast<double>(options_.limits.max_list_items))
      throw EvalError("range() of " + std::to_string(static_cast<uint64_t>(count)) +
                      " items exceeds the limit of " + std::to_string(options_.limits.max_list_items));
    budget_.charge_list(static_cast<size_t>(count));
    List items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
    return Value(std::move(items));
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value lhs = eval(*e.children[0]);
      return lhs.truthy() ? eval(*e.children[1]) : lhs;
    }
    if (op == "or") {
      Value lhs = eval(*e.children[0]);
      return lhs.truthy() ? lhs : eval(*e.children[1]);
    }
    Value a = eval(*e.children[0]);
    Value b = eval(*e.children[1]);
    return binary_operator(op, a, b, budget_);
  }

  const Template& tmpl_;
  const Dict& context_;
  const RenderOptions& options_;
  Budget budget_;
  std::vector<Scope> scopes_;
  std::string result_;
  std::string* out_ = nullptr;

 public:
  static std::string render_raising(const Template& t, const Dict& c, const RenderOptions& o) {
    try {
      return Renderer(t, c, o).run();
    } catch (const TemplateRaised& r) {
      throw ChatTemplateError(r.message);
    }
  }
};

}  // namespace

std::string render(const Template& tmpl, const Dict& context, const RenderOptions& options) {
  return Renderer::render_raising(tmpl, context, options);
}

}  // namespace peregrine::chat
