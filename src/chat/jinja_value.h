#pragma once
// The values a chat template computes with: Python-like dynamic values (Jinja evaluates Python
// objects), with Python's truthiness, equality, ordering and str()/repr() spelling, because the
// published templates are written against that behaviour (e.g. `{{ true }}` prints "True").
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace peregrine::chat {

class Value;
using List = std::vector<Value>;

// String-keyed, insertion-ordered mapping (tojson and items() keep the order a template built).
// A namespace() object is a Dict whose attributes can be assigned with `set ns.attr = ...`.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct Undefined {};
struct None {};

class Value {
 public:
  Value() = default;  // undefined
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(double f) : v_(f) {}
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : v_(std::make_shared<Dict>(std::move(d))) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::shared_ptr<const std::string>>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  double to_double() const;  // bool, int or float
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  // The shared mapping itself: namespaces are mutated through it (reference semantics, as in
  // Python, so an assignment inside a loop is seen after the loop).
  Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }

  // Python's bool(x); undefined is false.
  bool truthy() const;
  // Python's str(x), as `{{ x }}` prints it; undefined prints as "". Throws std::length_error
  // when the text of a list or dict would exceed max_size bytes (lists may share one long
  // string many times over).
  std::string str(size_t max_size = SIZE_MAX) const;
  // Python's repr(x) (strings quoted), used inside printed lists and dicts.
  std::string repr(size_t max_size = SIZE_MAX) const;
  // Python type name, for error messages ("str", "int", "list", "dict", "undefined").
  std::string type_name() const;

 private:
  void repr_into(std::string& out, size_t max_size) const;
  // Strings, lists and dicts are shared, so copying a value (into a list, a variable, a loop
  // item) never copies a long message; templates never mutate them in place.
  std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const std::string>,
               std::shared_ptr<List>, std::shared_ptr<Dict>>
      v_;
};

// Python ==, with 1 == 1.0 == True and deep comparison of lists and dicts.
bool equals(const Value& a, const Value& b);
// Python <; numbers with numbers, strings with strings (bytewise), lists lexicographically.
// Returns false and sets *ok=false when the types cannot be ordered.
bool less_than(const Value& a, const Value& b, bool* ok);

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson filter does it:
// separators ", " and ": " without indent, "," and ": " with it. indent < 0 means none.
// Returns false (leaving a partial *out) as soon as the text would exceed max_size bytes.
bool to_json(const Value& v, int indent, size_t max_size, std::string* out);

// UTF-8 aware helpers: Python indexes strings by code point.
std::vector<std::string_view> utf8_chars(std::string_view s);

}  // namespace peregrine::chat
