#include "schema_validator.h"

#include <cmath>
#include <cstdint>

namespace peregrine::fuzz {
namespace {

using Schema = nlohmann::ordered_json;
using Value = nlohmann::json;

constexpr size_t kMaxDepth = 512;

class Validator {
 public:
  explicit Validator(const Schema& root) : root_(root) {}

  // Empty when valid.
  std::string check(const Schema& s, const Value& v, const std::string& at, size_t depth) const {
    if (depth > kMaxDepth) return "";  // deeper than this validator follows: not judged
    if (s.is_boolean()) return s.get<bool>() ? "" : at + ": the schema false";
    if (!s.is_object()) return "";
    if (auto ref = s.find("$ref"); ref != s.end() && ref->is_string()) {
      const Schema* target = resolve(ref->get<std::string>());
      return target == nullptr ? "" : check(*target, v, at, depth + 1);
    }
    if (auto t = s.find("type"); t != s.end() && !type_matches(*t, v)) return at + ": not of type " + t->dump();
    if (s.contains("enum") || s.contains("const")) return enumeration(s, v, at);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto list = s.find(key); list != s.end() && list->is_array()) return any_of(*list, v, at, depth);
    }
    if (v.is_object()) return object(s, v, at, depth);
    if (v.is_array()) return array(s, v, at, depth);
    if (v.is_string()) return string(s, v, at);
    return "";
  }

 private:
  // "#" or "#/a/b" with ~0 and ~1 unescaped; null when it does not resolve.
  const Schema* resolve(const std::string& ref) const {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) != 0) return nullptr;
    const Schema* node = &root_;
    size_t start = 2;
    while (start <= ref.size()) {
      size_t end = ref.find('/', start);
      if (end == std::string::npos) end = ref.size();
      std::string key;
      for (size_t i = start; i < end; ++i) {
        if (ref[i] == '~' && i + 1 < end && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
          key += ref[++i] == '0' ? '~' : '/';
        } else {
          key += ref[i];
        }
      }
      if (!node->is_object()) return nullptr;
      auto it = node->find(key);
      if (it == node->end()) return nullptr;
      node = &*it;
      start = end + 1;
    }
    return node;
  }

  static bool is_type(const std::string& t, const Value& v) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") {
      if (v.is_number_integer()) return true;
      // Without casting to an integer type (a large double would overflow it).
      return v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>();
    }
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
  }
  static bool type_matches(const Schema& type, const Value& v) {
    if (type.is_string()) return is_type(type.get<std::string>(), v);
    if (!type.is_array()) return true;
    for (const Schema& t : type) {
      if (t.is_string() && is_type(t.get<std::string>(), v)) return true;
    }
    return false;
  }

  static std::string enumeration(const Schema& s, const Value& v, const std::string& at) {
    auto equals = [&](const Schema& option) { return Value::parse(option.dump()) == v; };
    if (auto c = s.find("const"); c != s.end()) return equals(*c) ? "" : at + ": not the const " + c->dump();
    if (auto e = s.find("enum"); e != s.end() && e->is_array()) {
      for (const Schema& option : *e) {
        if (equals(option)) return "";
      }
      return at + ": not one of the enum " + e->dump();
    }
    return "";
  }

  std::string any_of(const Schema& list, const Value& v, const std::string& at, size_t depth) const {
    std::string why;
    for (const Schema& branch : list) {
      why = check(branch, v, at, depth + 1);
      if (why.empty()) return "";
    }
    return at + ": no branch of anyOf/oneOf matches (" + why + ")";
  }

  std::string object(const Schema& s, const Value& v, const std::string& at, size_t depth) const {
    const Schema* props = nullptr;
    if (auto p = s.find("properties"); p != s.end() && p->is_object()) props = &*p;
    if (auto r = s.find("required"); r != s.end() && r->is_array()) {
      for (const Schema& name : *r) {
        if (name.is_string() && !v.contains(name.get<std::string>())) return at + ": required '" + name.get<std::string>() + "' missing";
      }
    }
    const auto extra = s.find("additionalProperties");
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string here = at + "/" + it.key();
      if (props != nullptr && props->contains(it.key())) {
        if (std::string why = check((*props)[it.key()], it.value(), here, depth + 1); !why.empty()) return why;
      } else if (extra != s.end()) {
        if (std::string why = check(*extra, it.value(), here, depth + 1); !why.empty()) return why;
      }
    }
    return "";
  }

  std::string array(const Schema& s, const Value& v, const std::string& at, size_t depth) const {
    if (auto m = s.find("minItems"); m != s.end() && m->is_number_integer() && v.size() < m->get<uint64_t>()) {
      return at + ": fewer items than minItems";
    }
    if (auto m = s.find("maxItems"); m != s.end() && m->is_number_integer() && v.size() > m->get<uint64_t>()) {
      return at + ": more items than maxItems";
    }
    if (auto items = s.find("items"); items != s.end() && !items->is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (std::string why = check(*items, v[i], at + "/" + std::to_string(i), depth + 1); !why.empty()) return why;
      }
    }
    return "";
  }

  static std::string string(const Schema& s, const Value& v, const std::string& at) {
    const auto& text = v.get_ref<const std::string&>();
    uint64_t code_points = 0;
    for (char c : text) code_points += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
    if (auto m = s.find("minLength"); m != s.end() && m->is_number_integer() && code_points < m->get<uint64_t>()) {
      return at + ": shorter than minLength";
    }
    if (auto m = s.find("maxLength"); m != s.end() && m->is_number_integer() && code_points > m->get<uint64_t>()) {
      return at + ": longer than maxLength";
    }
    return "";
  }

  const Schema& root_;
};

}  // namespace

std::string schema_violation(const Schema& root, const Schema& schema, const Value& value) {
  return Validator(root).check(schema, value, "#", 0);
}

}  // namespace peregrine::fuzz
