#include "chat/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace peregrine::chat {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

double Value::to_double() const {
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  if (is_int()) return static_cast<double>(as_int());
  return as_float();
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  return !as_dict().items.empty();
}

namespace {

std::string float_str(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Python's repr of a str: single quotes unless the text has a ' and no ".
std::string quote_python(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) {
          out += '\\';
          out += c;
        } else {
          out += c;
        }
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string Value::str(size_t max_size) const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr(max_size);
}

std::string Value::repr(size_t max_size) const {
  std::string out;
  repr_into(out, max_size);
  return out;
}

void Value::repr_into(std::string& out, size_t max_size) const {
  if (out.size() > max_size) throw std::length_error("value too large to print");
  if (is_undefined()) return;
  if (is_none()) {
    out += "None";
  } else if (is_bool()) {
    out += as_bool() ? "True" : "False";
  } else if (is_int()) {
    out += std::to_string(as_int());
  } else if (is_float()) {
    out += float_str(as_float());
  } else if (is_string()) {
    if (as_string().size() > max_size - out.size()) throw std::length_error("value too large to print");
    out += quote_python(as_string());
  } else if (is_list()) {
    out += '[';
    bool first = true;
    for (const auto& v : as_list()) {
      if (!first) out += ", ";
      first = false;
      v.repr_into(out, max_size);
    }
    out += ']';
  } else if (as_dict().is_namespace) {
    out += "<Namespace>";
  } else {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : as_dict().items) {
      if (!first) out += ", ";
      first = false;
      out += quote_python(k) + ": ";
      v.repr_into(out, max_size);
    }
    out += '}';
  }
  if (out.size() > max_size) throw std::length_error("value too large to print");
}

std::string Value::type_name() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  return as_dict().is_namespace ? "Namespace" : "dict";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
      int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
      return x == y;
    }
    return a.to_double() == b.to_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equals(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.as_dict();
    const Dict& y = b.as_dict();
    if (&x == &y) return true;
    if (x.is_namespace || y.is_namespace) return false;  // identity only, as in Python
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* other = y.find(k);
      if (!other || !equals(v, *other)) return false;
    }
    return true;
  }
  return false;
}

bool less_than(const Value& a, const Value& b, bool* ok) {
  *ok = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    return a.to_double() < b.to_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i], ok);
    }
    return x.size() < y.size();
  }
  *ok = false;
  return false;
}

namespace {

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, int indent, int depth, size_t max_size, std::string& out) {
  if (out.size() > max_size) return;
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * d, ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  if (v.is_undefined() || v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double f = v.as_float();
    out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : v.repr();
  } else if (v.is_string()) {
    json_string(v.as_string(), out);
  } else if (v.is_list()) {
    const List& l = v.as_list();
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) out += item_sep;
      if (indent >= 0) newline(depth + 1);
      json_value(l[i], indent, depth + 1, max_size, out);
      if (out.size() > max_size) return;
    }
    if (indent >= 0) newline(depth);
    out += ']';
  } else {
    const Dict& d = v.as_dict();
    if (d.items.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (i) out += item_sep;
      if (indent >= 0) newline(depth + 1);
      json_string(d.items[i].first, out);
      out += ": ";
      json_value(d.items[i].second, indent, depth + 1, max_size, out);
      if (out.size() > max_size) return;
    }
    if (indent >= 0) newline(depth);
    out += '}';
  }
}

}  // namespace

bool to_json(const Value& v, int indent, size_t max_size, std::string* out) {
  out->clear();
  json_value(v, indent, 0, max_size, *out);
  return out->size() <= max_size;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> chars;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 1;
    chars.push_back(s.substr(i, len));
    i += len;
  }
  return chars;
}

}  // namespace peregrine::chat
