#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/grammar_builder.h"

namespace peregrine {
namespace {

using Json = nlohmann::ordered_json;

// The JSON building blocks, shared by every schema. Whitespace is at most one space, and only
// inside objects and arrays (none before or after the whole value, so the text ends with its last
// bracket): outputs are compact and a model cannot wander off into whitespace; \u escapes exclude surrogates, so every
// escape is one character (as minLength/maxLength count them); numbers have at most 16 digits before the point and a
// two-digit exponent, so every one is a finite double.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> rules = {
      {"space", R"(" "?)"},
      {"char",
       R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [eE] [0-9a-fA-F]{3} ) ))"},
      {"string", R"("\"" char* "\"")"},
      {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))"},
      {"number", R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)"},
      {"boolean", R"("true" | "false")"},
      {"null", R"("null")"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object",
       R"("{" space ( string space ":" space value space ( "," space string space ":" space value space )* )? "}")"},
      {"array", R"("[" space ( value space ( "," space value space )* )? "]")"},
  };
  return rules;
}

// Which primitives each one uses (so only what is needed is emitted).
const std::map<std::string, std::vector<std::string>>& primitive_uses() {
  static const std::map<std::string, std::vector<std::string>> uses = {
      {"string", {"char"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"space", "string", "value"}},
      {"array", {"space", "value"}},
  };
  return uses;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {"type",     "properties", "required",    "additionalProperties",
                                          "enum",     "const",      "anyOf",       "oneOf",
                                          "$ref",     "$defs",      "definitions", "items",
                                          "minItems", "maxItems",   "minLength",   "maxLength",
                                          "pattern",  "format"};
  return k;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title", "description", "default",    "examples", "$schema",
                                          "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
  return k;
}

// String contents (between the quotes) of the supported formats. Dates keep each month to the
// days it always has (February to 28), so every output is a real date.
std::string format_body(const std::string& format) {
  const std::string two = "[0-9] [0-9]";
  const std::string date =
      R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))";
  const std::string time =
      R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return "( " + date + " ) \"T\" ( " + time + " )";
  if (format == "uuid")
    return "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
  return "";
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += word ? c : '-';
  }
  if (out.empty() || out.size() > 40) out = out.substr(0, 40) + "x";
  return out;
}

// JSON pointer token unescaping (~1 -> /, ~0 -> ~).
std::string pointer_token(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '~' && i + 1 < t.size() && (t[i + 1] == '0' || t[i + 1] == '1')) {
      out += t[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += t[i];
    }
  }
  return out;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& root) : root_(root) {
    for (const auto& [name, body] : primitives()) names_.insert(name);
    names_.insert("root");
  }

  std::string compile() {
    refs_["#"] = "root";
    open_refs_.insert("#");
    const std::string body = visit(root_, "#", 0);
    std::string text = "root ::= " + body + "\n";
    for (const auto& [name, rule] : rules_) text += name + " ::= " + rule + "\n";
    for (const std::string& p : used_) text += p + " ::= " + primitives().at(p) + "\n";
    return text;
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw GrammarError("json schema: " + what + " at " + path);
  }

  void use(const std::string& primitive) {
    if (!used_.insert(primitive).second) return;
    if (auto it = primitive_uses().find(primitive); it != primitive_uses().end()) {
      for (const std::string& p : it->second) use(p);
    }
  }
  std::string prim(const std::string& name) {
    use(name);
    return name;
  }

  std::string new_name(const std::string& hint) {
    std::string base = sanitize(hint);
    std::string name = base;
    for (int k = 2; names_.count(name) != 0; ++k) name = base + "-" + std::to_string(k);
    names_.insert(name);
    return name;
  }
  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = new_name(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  static std::string hint_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "root" : path.substr(slash + 1);
  }

  void check_keywords(const Json& s, const std::string& path) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (supported_keywords().count(it.key()) == 0 && annotations().count(it.key()) == 0) {
        fail(path, "unsupported keyword '" + it.key() + "'");
      }
    }
  }

  std::string visit(const Json& s, const std::string& path, size_t depth) {
    if (depth > kMaxSchemaDepth) fail(path, "schema nested deeper than " + std::to_string(kMaxSchemaDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false matches nothing");
      return prim("value");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    check_keywords(s, path);
    if (s.contains("$ref")) return ref(s, path, depth);
    if (s.contains("enum") || s.contains("const")) return enumeration(s, path);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (s.contains(key)) return alternatives(s, key, path, depth);
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const Json& v : *t) {
          if (!v.is_string()) fail(path + "/type", "'type' must be a string or a list of strings");
          types.push_back(v.get<std::string>());
        }
      } else {
        fail(path + "/type", "'type' must be a string or a non-empty list of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      // Object keywords without a type make an object: "any value" would let an object that
      // lacks a required key through (found by fuzz_json_schema).
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return prim("value");
    }
    std::string out;
    for (const std::string& type : types) {
      if (!out.empty()) out += " | ";
      out += typed(s, type, path, depth);
    }
    return types.size() == 1 ? out : "( " + out + " )";
  }

  std::string typed(const Json& s, const std::string& type, const std::string& path, size_t depth) {
    if (type == "object") return object(s, path, depth);
    if (type == "array") return array(s, path, depth);
    if (type == "string") return string(s, path);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return prim(type);
    fail(path + "/type", "unknown type '" + type + "'");
  }

  std::string ref(const Json& s, const std::string& path, size_t depth) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "$ref" && it.key() != "$defs" && it.key() != "definitions" &&
          annotations().count(it.key()) == 0) {
        fail(path, "'$ref' alongside '" + it.key() + "' is not supported");
      }
    }
    if (!s["$ref"].is_string()) fail(path + "/$ref", "'$ref' must be a string");
    const std::string target = s["$ref"].get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) {
      if (open_refs_.count(target) != 0) {
        fail(path + "/$ref", "'" + target +
                                 "' refers back to itself before any text is written (through $ref, anyOf or oneOf "
                                 "only), so it could never end");
      }
      return it->second;
    }
    if (target.rfind("#/", 0) != 0)
      fail(path + "/$ref", "only local references ('#/$defs/...') are supported, not '" + target + "'");
    const Json* node = &root_;
    size_t start = 2;
    while (start <= target.size()) {
      const size_t end = std::min(target.find('/', start), target.size());
      const std::string key = pointer_token(target.substr(start, end - start));
      if (!node->is_object() || !node->contains(key)) fail(path + "/$ref", "'" + target + "' does not resolve");
      node = &(*node)[key];
      start = end + 1;
    }
    const std::string name = new_name("ref-" + hint_of(target));
    refs_[target] = name;  // before the body: a recursive schema refers to its own rule
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    open_refs_.insert(target);
    const std::string body = visit(*node, target, depth + 1);
    open_refs_.erase(target);
    rules_[slot].second = body;
    return name;
  }

  std::string enumeration(const Json& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "enum" && it.key() != "const" && it.key() != "type" && annotations().count(it.key()) == 0) {
        fail(path, "'enum'/'const' alongside '" + it.key() + "' is not supported");
      }
    }
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(path + "/enum", "'enum' must be a non-empty list");
      if (s.contains("const")) fail(path, "'enum' together with 'const' is not supported");
      for (const Json& v : s["enum"]) values.push_back(v);
    }
    std::string out;
    for (const Json& v : values) {
      if (s.contains("type") && !has_type(v, s["type"])) continue;
      if (!out.empty()) out += " | ";
      out += gbnf_literal(v.dump());
    }
    if (out.empty()) fail(path, "no value of 'enum'/'const' has the schema's 'type'");
    return "( " + out + " )";
  }

  static bool has_type(const Json& v, const Json& type) {
    auto is = [&](const std::string& t) {
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      if (t == "string") return v.is_string();
      if (t == "integer") {
        // An integral float, found without converting it to an integer type (1e300 overflows one).
        return v.is_number_integer() ||
               (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>());
      }
      if (t == "number") return v.is_number();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      return false;
    };
    if (type.is_string()) return is(type.get<std::string>());
    if (type.is_array()) {
      for (const Json& t : type) {
        if (t.is_string() && is(t.get<std::string>())) return true;
      }
    }
    return false;
  }

  std::string alternatives(const Json& s, const char* key, const std::string& path, size_t depth) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != key && it.key() != "$defs" && it.key() != "definitions" && annotations().count(it.key()) == 0) {
        fail(path, std::string("'") + key + "' alongside '" + it.key() + "' is not supported");
      }
    }
    const Json& list = s[key];
    if (!list.is_array() || list.empty()) fail(path + "/" + key, std::string("'") + key + "' must be a non-empty list");
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!out.empty()) out += " | ";
      out += visit(list[i], path + "/" + key + "/" + std::to_string(i), depth + 1);
    }
    return "( " + out + " )";
  }

  static int64_t count_keyword(const Json& s, const char* key, const std::string& path, int64_t fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      fail(path + "/" + key, std::string("'") + key + "' must be a non-negative integer");
    if (it->get<int64_t>() > kMaxSchemaRepeat) {
      fail(path + "/" + key,
           std::string("'") + key + "' above " + std::to_string(kMaxSchemaRepeat) + " is not supported");
    }
    return it->get<int64_t>();
  }

  // GBNF repetition of `unit` between lo and hi times (hi < 0: unbounded).
  static std::string repeat(const std::string& unit, int64_t lo, int64_t hi) {
    if (hi < 0) return lo == 0 ? unit + "*" : unit + "{" + std::to_string(lo) + ",}";
    return unit + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  std::string string(const Json& s, const std::string& path) {
    const int64_t min = count_keyword(s, "minLength", path, 0);
    const int64_t max = count_keyword(s, "maxLength", path, -1);
    if (max >= 0 && max < min) fail(path, "'maxLength' is below 'minLength'");
    if (s.contains("pattern") || s.contains("format")) {
      if (s.contains("minLength") || s.contains("maxLength")) {
        fail(path, "'minLength'/'maxLength' together with 'pattern' or 'format' is not supported");
      }
      if (s.contains("pattern") && s.contains("format"))
        fail(path, "'pattern' together with 'format' is not supported");
    }
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) fail(path + "/pattern", "'pattern' must be a string");
      std::string body;
      try {
        body = regex_to_gbnf(p->get<std::string>());
      } catch (const GrammarError& e) {
        throw GrammarError(std::string(e.what()) + " at " + path + "/pattern");
      }
      if (body.find("char") != std::string::npos) use("char");
      return add_rule(hint_of(path), "\"\\\"\" ( " + body + " ) \"\\\"\"");
    }
    if (auto f = s.find("format"); f != s.end()) {
      const std::string body = f->is_string() ? format_body(f->get<std::string>()) : "";
      if (body.empty())
        fail(path + "/format", "unsupported format " + f->dump() + " (supported: date, time, date-time, uuid)");
      return add_rule(hint_of(path), "\"\\\"\" ( " + body + " ) \"\\\"\"");
    }
    if (min == 0 && max < 0) return prim("string");
    use("char");
    return add_rule(hint_of(path), "\"\\\"\" " + repeat("char", min, max) + " \"\\\"\"");
  }

  std::string array(const Json& s, const std::string& path, size_t depth) {
    std::string item = prim("value");
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) fail(path + "/items", "'items' as a list (tuple validation) is not supported");
      const AfterInput after(open_refs_);
      item = visit(*it, path + "/items", depth + 1);
    }
    const int64_t min = count_keyword(s, "minItems", path, 0);
    const int64_t max = count_keyword(s, "maxItems", path, -1);
    if (max >= 0 && max < min) fail(path, "'maxItems' is below 'minItems'");
    use("space");
    std::string body;
    if (max == 0) {
      body = "\"[\" space \"]\"";
    } else {
      const std::string first = item + " space";
      const std::string more = repeat("( \",\" space " + first + " )", min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
      const std::string list = first + " " + more;
      body = "\"[\" space " + (min == 0 ? "( " + list + " )?" : list) + " \"]\"";
    }
    return add_rule(hint_of(path), body);
  }

  std::string object(const Json& s, const std::string& path, size_t depth) {
    const Json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props != nullptr && !props->is_object()) fail(path + "/properties", "'properties' must be an object");
    const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra != nullptr && !extra->is_boolean() && !extra->is_object()) {
      fail(path + "/additionalProperties", "'additionalProperties' must be a boolean or a schema");
    }
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) fail(path + "/required", "'required' must be a list of names");
      for (const Json& name : *r) {
        if (!name.is_string()) fail(path + "/required", "'required' must be a list of names");
        if (props == nullptr || !props->contains(name.get<std::string>())) {
          fail(path + "/required", "required property '" + name.get<std::string>() + "' is not in 'properties'");
        }
        required.insert(name.get<std::string>());
      }
    }
    use("space");
    if (props == nullptr || props->empty()) {
      if (extra == nullptr || (extra->is_boolean() && extra->get<bool>())) return prim("object");
      if (extra->is_boolean()) return add_rule(hint_of(path), "\"{\" space \"}\"");
      const AfterInput after(open_refs_);
      const std::string value = visit(*extra, path + "/additionalProperties", depth + 1);
      const std::string kv = prim("string") + " space \":\" space " + value + " space";
      return add_rule(hint_of(path), "\"{\" space ( " + kv + " ( \",\" space " + kv + " )* )? \"}\"");
    }
    if (extra != nullptr && extra->is_object()) {
      fail(path + "/additionalProperties",
           "'additionalProperties' as a schema alongside 'properties' is not supported");
    }
    std::vector<std::pair<std::string, bool>> kvs;  // (rule text of "key": value, required)
    const AfterInput after(open_refs_);
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string value = visit(it.value(), path + "/properties/" + it.key(), depth + 1);
      kvs.emplace_back(gbnf_literal(Json(it.key()).dump()) + " space \":\" space " + value + " space",
                       required.count(it.key()) != 0);
    }
    return add_rule(hint_of(path), "\"{\" space " + property_list(kvs, hint_of(path)) + " \"}\"");
  }

  // Properties in order, each optional one may be left out, commas only between those present:
  //   first(i) = kv_i after(i+1) | first(i+1) if i is optional     (nothing written yet)
  //   after(i) = "," space kv_i after(i+1) | after(i+1) if optional (something written)
  std::string property_list(const std::vector<std::pair<std::string, bool>>& kvs, const std::string& hint) {
    const size_t n = kvs.size();
    std::vector<std::string> first(n + 1);
    std::vector<std::string> after(n + 1);
    first[n] = "\"\"";
    after[n] = "\"\"";
    for (size_t k = n; k-- > 0;) {
      const auto& [kv, req] = kvs[k];
      std::string a = "\",\" space " + kv + " " + after[k + 1];
      if (!req) a += " | " + after[k + 1];
      after[k] = k + 1 < n ? add_rule(hint + "-after", a) : "( " + a + " )";
      std::string f = kv + " " + after[k + 1];
      if (!req) f += " | " + first[k + 1];
      first[k] = k > 0 ? add_rule(hint + "-from", f) : "( " + f + " )";
    }
    return first[0];
  }

  // While the values inside an object or an array are visited, the refs open around it are set
  // aside: reaching one of them again is recursion after "{" or "[", which is fine.
  class AfterInput {
   public:
    explicit AfterInput(std::set<std::string>& open) : open_(open), saved_(std::exchange(open, {})) {}
    ~AfterInput() { open_ = std::move(saved_); }
    AfterInput(const AfterInput&) = delete;
    AfterInput& operator=(const AfterInput&) = delete;

   private:
    std::set<std::string>& open_;
    std::set<std::string> saved_;
  };

  const Json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::set<std::string> used_;
  std::map<std::string, std::string> refs_;
  // The $refs being expanded with no text written since they began ("#" is the root): reaching one
  // again would make a rule that can reach itself without reading a byte.
  std::set<std::string> open_refs_;
};

}  // namespace

std::string gbnf_literal(const std::string& bytes) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return SchemaCompiler(schema).compile(); }

Grammar compile_json_schema(const nlohmann::ordered_json& schema) {
  const std::string text = json_schema_to_gbnf(schema);
  return build_grammar(parse_gbnf(text), text, "root");
}

std::string json_object_gbnf() { return json_schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}}); }

}  // namespace peregrine
