#pragma once
// A small JSON Schema validator for fuzz_json_schema, written apart from the schema compiler: does
// a JSON value satisfy the schema, for the keywords the compiler supports (type, properties,
// required, additionalProperties, enum, const, anyOf, oneOf as "at least one", $ref into the
// document, items, minItems, maxItems, minLength, maxLength)? `pattern` and `format` are not
// checked (that would need a second regex engine); every other keyword is ignored.
#include <nlohmann/json.hpp>
#include <string>

namespace peregrine::fuzz {

// Empty when `value` satisfies `schema` (whose document root is `root`), else where and why not.
std::string schema_violation(const nlohmann::ordered_json& root, const nlohmann::ordered_json& schema,
                             const nlohmann::json& value);

}  // namespace peregrine::fuzz
