#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>

namespace peregrine::chat {

namespace {

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

// Argument i, given by position or by keyword `name`; undefined when absent.
Value arg(const std::vector<Value>& args, const Kwargs& kwargs, size_t i, std::string_view name) {
  if (i < args.size()) return args[i];
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  return Value();
}

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) throw EvalError(std::string(what) + " expects a string, got '" + v.type_name() + "'");
  return v.as_string();
}

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string upper(std::string s) {
  for (char& c : s) c = ascii_upper(c);
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}
std::string capitalize(std::string s) {
  s = lower(std::move(s));
  if (!s.empty()) s[0] = ascii_upper(s[0]);
  return s;
}
// Python str.title(): a letter after a non-letter starts a word.
std::string title(std::string s) {
  bool prev_alpha = false;
  for (char& c : s) {
    c = prev_alpha ? ascii_lower(c) : ascii_upper(c);
    prev_alpha = ascii_alpha(c) || (static_cast<unsigned char>(c) >= 0x80);
  }
  return s;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                    Budget& budget) {
  if (from.empty()) throw EvalError("replace() with an empty search string is not supported");
  size_t hits = 0;
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + from.size())) ++hits;
  if (count >= 0) hits = std::min<size_t>(hits, static_cast<size_t>(count));
  size_t size = s.size() - hits * from.size();
  if (to.size() && hits > (budget.limits().max_output_bytes) / to.size()) throw EvalError("replace() result too large");
  budget.charge_string(size + hits * to.size());
  std::string out;
  size_t start = 0;
  for (size_t done = 0; done < hits; ++done) {
    size_t p = s.find(from, start);
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

Value split(const std::string& s, const Value& sep_v, const Value& max_v, Budget& budget) {
  int64_t max_split = max_v.is_int() ? max_v.as_int() : -1;
  List parts;
  if (sep_v.is_undefined() || sep_v.is_none()) {  // runs of whitespace, no empty parts
    size_t p = s.find_first_not_of(kWhitespace);
    while (p != std::string::npos) {
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.emplace_back(strip(s.substr(p), "", false, true));
        break;
      }
      size_t e = s.find_first_of(kWhitespace, p);
      parts.emplace_back(s.substr(p, e == std::string::npos ? std::string::npos : e - p));
      p = e == std::string::npos ? e : s.find_first_not_of(kWhitespace, e);
    }
  } else {
    const std::string& sep = need_string(sep_v, "split()");
    if (sep.empty()) throw EvalError("split(): empty separator");
    size_t start = 0;
    while (true) {
      size_t p = s.find(sep, start);
      if (p == std::string::npos || (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split)) {
        parts.emplace_back(s.substr(start));
        break;
      }
      parts.emplace_back(s.substr(start, p - start));
      start = p + sep.size();
    }
  }
  budget.charge_list(parts.size());
  budget.charge_string(s.size());
  return Value(std::move(parts));
}

List to_list(const Value& v) {
  if (v.is_list()) return v.as_list();
  if (v.is_undefined()) return {};
  if (v.is_string()) {
    List chars;
    for (auto c : utf8_chars(v.as_string())) chars.emplace_back(c);
    return chars;
  }
  if (v.is_dict()) {
    List keys;
    for (const auto& kv : v.as_dict().items) keys.emplace_back(kv.first);
    return keys;
  }
  throw EvalError("'" + v.type_name() + "' object is not iterable");
}

Value items_of(const Value& v, Budget& budget) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) throw EvalError("items() needs a mapping, got '" + v.type_name() + "'");
  budget.charge_list(v.as_dict().items.size() * 3);
  List out;
  for (const auto& [k, val] : v.as_dict().items) out.emplace_back(List{Value(k), val});
  return Value(std::move(out));
}

Value attribute_of(const Value& v, const std::string& attr) {
  if (!v.is_dict()) return Value();
  // Jinja allows dotted paths: map(attribute='function.name').
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = attr.find('.', start);
    std::string key = attr.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur.is_dict()) return Value();
    const Value* next = cur.as_dict().find(key);
    if (!next) return Value();
    cur = *next;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// select / reject / selectattr / rejectattr.
Value select(const Value& seq, const std::vector<Value>& args, bool by_attr, bool keep_if, Budget& budget) {
  List items = to_list(seq);
  size_t first_test_arg = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) attr = need_string(args.empty() ? Value() : args[0], "selectattr()");
  std::string test = args.size() > first_test_arg ? need_string(args[first_test_arg], "test name") : "";
  std::vector<Value> test_args(args.begin() + std::min(args.size(), first_test_arg + 1), args.end());
  List out;
  for (const auto& item : items) {
    Value subject = by_attr ? attribute_of(item, attr) : item;
    bool ok = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (ok == keep_if) out.push_back(item);
  }
  budget.charge_list(out.size());
  return Value(std::move(out));
}

// One filter call: `subject | name(args, kwargs)`, and the budget its result is charged to.
struct FilterCall {
  std::string_view name;  // as written: aliases share a function (first / last tell apart by it)
  const Value& v;
  const std::vector<Value>& args;
  const Kwargs& kwargs;
  Budget& budget;

  // Argument i, given by position or by keyword; undefined when absent.
  Value param(size_t i, std::string_view keyword) const { return arg(args, kwargs, i, keyword); }
  size_t max_text() const { return budget.limits().max_output_bytes; }
};

using FilterFn = Value (*)(const FilterCall&);

[[noreturn]] void unknown_filter(std::string_view name) {
  throw EvalError("unknown filter '" + std::string(name) + "'");
}

Value filter_trim(const FilterCall& c) {
  Value chars = c.param(0, "chars");
  return Value(strip(c.v.str(c.max_text()), chars.is_string() ? chars.as_string() : "", true, true));
}

Value filter_length(const FilterCall& c) {
  const Value& v = c.v;
  if (v.is_string()) return Value(static_cast<int64_t>(utf8_chars(v.as_string()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
  if (v.is_undefined()) return Value(int64_t{0});
  throw EvalError("object of type '" + v.type_name() + "' has no length");
}

Value filter_default(const FilterCall& c) {
  Value fallback = c.param(0, "default_value");
  bool boolean = c.param(1, "boolean").truthy();
  if (c.v.is_undefined() || (boolean && !c.v.truthy())) return fallback.is_undefined() ? Value("") : fallback;
  return c.v;
}

Value filter_tojson(const FilterCall& c) {
  Value indent = c.param(0, "indent");
  int ind = -1;
  if (indent.is_int()) ind = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  std::string out;
  if (!to_json(c.v, ind, c.max_text(), &out)) throw EvalError("tojson result too large");
  c.budget.charge_string(out.size());
  return Value(std::move(out));
}

Value filter_first_or_last(const FilterCall& c) {
  List items = to_list(c.v);
  if (items.empty()) return Value();
  return c.name == "first" ? items.front() : items.back();
}

Value filter_join(const FilterCall& c) {
  Value sep_v = c.param(0, "d");
  std::string sep = sep_v.is_undefined() ? "" : sep_v.str(c.max_text());
  Value attr = c.param(1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : to_list(c.v)) {
    if (!first) out += sep;
    first = false;
    out += (attr.is_string() ? attribute_of(item, attr.as_string()) : item).str(c.max_text());
    if (out.size() > c.max_text()) throw EvalError("join() result too large");
  }
  c.budget.charge_string(out.size());
  return Value(std::move(out));
}

Value filter_replace(const FilterCall& c) {
  Value count = c.param(2, "count");
  return Value(replace(c.v.str(c.max_text()), need_string(c.param(0, "old"), "replace()"),
                       need_string(c.param(1, "new"), "replace()"), count.is_int() ? count.as_int() : -1, c.budget));
}

// Python int(): numbers truncate, strings parse as base 10, anything else is `default` (or 0).
Value filter_int(const FilterCall& c) {
  const Value& v = c.v;
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float() && std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18)
    return Value(static_cast<int64_t>(v.as_float()));
  if (v.is_string()) {
    std::string s = strip(v.as_string(), "", true, true);
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value(int64_t{x});
  }
  Value fallback = c.param(0, "default");
  return fallback.is_int() ? fallback : Value(int64_t{0});
}

Value filter_float(const FilterCall& c) {
  const Value& v = c.v;
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    std::string s = strip(v.as_string(), "", true, true);
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(x);
  }
  return Value(0.0);
}

Value filter_list(const FilterCall& c) {
  List items = to_list(c.v);
  c.budget.charge_list(items.size());
  return Value(std::move(items));
}

Value filter_reverse(const FilterCall& c) {
  if (c.v.is_string()) {
    auto chars = utf8_chars(c.v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(*it);
    return Value(std::move(out));
  }
  List items = to_list(c.v);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

// map(attribute='a.b') or map('filter', args...).
Value filter_map(const FilterCall& c) {
  Value attr = c.param(99, "attribute");  // keyword only
  List out;
  for (const auto& item : to_list(c.v)) {
    if (attr.is_string()) {
      out.push_back(attribute_of(item, attr.as_string()));
    } else if (!c.args.empty()) {
      std::vector<Value> rest(c.args.begin() + 1, c.args.end());
      out.push_back(apply_filter(need_string(c.args[0], "map()"), item, rest, {}, c.budget));
    } else {
      throw EvalError("map() needs a filter name or attribute=");
    }
  }
  c.budget.charge_list(out.size());
  return Value(std::move(out));
}

Value filter_abs(const FilterCall& c) {
  if (c.v.is_int() && c.v.as_int() != INT64_MIN) return Value(c.v.as_int() < 0 ? -c.v.as_int() : c.v.as_int());
  if (c.v.is_float()) return Value(std::fabs(c.v.as_float()));
  unknown_filter(c.name);  // as Jinja's: abs of anything else is no filter at all
}

// Every filter by name (aliases listed separately).
constexpr std::pair<std::string_view, FilterFn> kFilters[] = {
    {"trim", filter_trim},
    {"upper", [](const FilterCall& c) { return Value(upper(c.v.str(c.max_text()))); }},
    {"lower", [](const FilterCall& c) { return Value(lower(c.v.str(c.max_text()))); }},
    {"capitalize", [](const FilterCall& c) { return Value(capitalize(c.v.str(c.max_text()))); }},
    {"title", [](const FilterCall& c) { return Value(title(c.v.str(c.max_text()))); }},
    {"string", [](const FilterCall& c) { return Value(c.v.str(c.max_text())); }},
    {"safe", [](const FilterCall& c) { return c.v; }},  // no autoescaping here
    {"e", [](const FilterCall& c) { return c.v; }},
    {"escape", [](const FilterCall& c) { return c.v; }},
    {"length", filter_length},
    {"count", filter_length},
    {"default", filter_default},
    {"d", filter_default},
    {"tojson", filter_tojson},
    {"first", filter_first_or_last},
    {"last", filter_first_or_last},
    {"join", filter_join},
    {"replace", filter_replace},
    {"int", filter_int},
    {"float", filter_float},
    {"list", filter_list},
    {"reverse", filter_reverse},
    {"items", [](const FilterCall& c) { return items_of(c.v, c.budget); }},
    {"select", [](const FilterCall& c) { return select(c.v, c.args, false, true, c.budget); }},
    {"reject", [](const FilterCall& c) { return select(c.v, c.args, false, false, c.budget); }},
    {"selectattr", [](const FilterCall& c) { return select(c.v, c.args, true, true, c.budget); }},
    {"rejectattr", [](const FilterCall& c) { return select(c.v, c.args, true, false, c.budget); }},
    {"map", filter_map},
    {"abs", filter_abs},
};

}  // namespace

std::string strip(std::string_view s, std::string_view chars, bool left, bool right) {
  if (chars.empty()) chars = kWhitespace;
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && chars.find(s[b]) != std::string_view::npos) ++b;
  if (right)
    while (e > b && chars.find(s[e - 1]) != std::string_view::npos) --e;
  return std::string(s.substr(b, e - b));
}

Value apply_filter(std::string_view name, const Value& v, const std::vector<Value>& args, const Kwargs& kwargs,
                   Budget& budget) {
  for (const auto& [filter_name, fn] : kFilters) {
    if (filter_name == name) return fn(FilterCall{name, v, args, kwargs, budget});
  }
  unknown_filter(name);
}

bool apply_test(std::string_view name, const Value& v, const std::vector<Value>& args) {
  auto need_arg = [&]() -> const Value& {
    if (args.empty()) throw EvalError("test '" + std::string(name) + "' needs an argument");
    return args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_int() || v.is_float();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return false;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equals(v, need_arg());
  if (name == "ne" || name == "!=") return !equals(v, need_arg());
  if (name == "in") {
    const Value& c = need_arg();
    if (c.is_list())
      return std::any_of(c.as_list().begin(), c.as_list().end(), [&](const Value& x) { return equals(x, v); });
    if (c.is_string() && v.is_string()) return c.as_string().find(v.as_string()) != std::string::npos;
    if (c.is_dict() && v.is_string()) return c.as_dict().find(v.as_string()) != nullptr;
    return false;
  }
  if (name == "lower") return v.is_string() && lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) throw EvalError("test '" + std::string(name) + "' needs an integer");
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& d = need_arg();
    if (!v.is_int() || !d.is_int() || d.as_int() == 0) throw EvalError("divisibleby needs non-zero integers");
    return d.as_int() == -1 || v.as_int() % d.as_int() == 0;
  }
  throw EvalError("unknown test '" + std::string(name) + "'");
}

Value call_method(const Value& obj, std::string_view name, const std::vector<Value>& args, const Kwargs& kwargs,
                  Budget& budget) {
  auto a = [&](size_t i, std::string_view kw) { return arg(args, kwargs, i, kw); };
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      Value chars = a(0, "chars");
      return Value(strip(s, chars.is_string() ? chars.as_string() : "", name != "rstrip", name != "lstrip"));
    }
    if (name == "startswith" || name == "endswith") {
      Value p = a(0, "prefix");
      List options = p.is_list() ? p.as_list() : List{p};
      for (const auto& o : options) {
        const std::string& x = need_string(o, std::string(name) + "()");
        if (x.size() <= s.size() &&
            (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
          return Value(true);
      }
      return Value(false);
    }
    if (name == "split") return split(s, a(0, "sep"), a(1, "maxsplit"), budget);
    if (name == "upper") return Value(upper(s));
    if (name == "lower") return Value(lower(s));
    if (name == "title") return Value(title(s));
    if (name == "capitalize") return Value(capitalize(s));
    if (name == "replace") {
      Value count = a(2, "count");
      return Value(replace(s, need_string(a(0, "old"), "replace()"), need_string(a(1, "new"), "replace()"),
                           count.is_int() ? count.as_int() : -1, budget));
    }
    if (name == "find") {
      size_t p = s.find(need_string(a(0, "sub"), "find()"));
      return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p));
    }
    if (name == "join") return apply_filter("join", a(0, "iterable"), {obj}, {}, budget);
  }
  if (obj.is_dict() && !obj.as_dict().is_namespace) {
    if (name == "items") return items_of(obj, budget);
    if (name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : obj.as_dict().items) out.push_back(name == "keys" ? Value(k) : v);
      budget.charge_list(out.size());
      return Value(std::move(out));
    }
    if (name == "get") {
      Value key = a(0, "key");
      const Value* found = key.is_string() ? obj.as_dict().find(key.as_string()) : nullptr;
      if (found) return *found;
      Value dflt = a(1, "default");
      return dflt.is_undefined() ? Value(None{}) : dflt;
    }
  }
  throw EvalError("'" + obj.type_name() + "' object has no method '" + std::string(name) + "'");
}

}  // namespace peregrine::chat
