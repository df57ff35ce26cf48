#pragma once
// JSON Schema (a subset) compiled to GBNF (gbnf.h), so that every text the grammar accepts is
// JSON that validates against the schema. Supported:
//   type (one or a list): object, array, string, number, integer, boolean, null
//   properties (generated in the order written), required, additionalProperties (false, true, or
//     a schema when there are no properties)
//   enum, const; anyOf and oneOf (as alternatives: oneOf's "exactly one" is not enforced when
//     branches overlap); $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed)
//   items (one schema), minItems, maxItems (up to kMaxSchemaRepeat)
//   minLength, maxLength (code points, up to kMaxSchemaRepeat), pattern (regex_to_gbnf), format
//     date, time, date-time, uuid
//   annotations, ignored: title, description, default, examples, $schema, $id, $comment,
//     deprecated, readOnly, writeOnly
// Any other keyword is a GrammarError naming it and where it is, e.g.
//   "json schema: unsupported keyword 'minimum' at #/properties/age".
// An object schema without additionalProperties: false produces only its declared properties: a
// subset of what it allows, every output still valid. The JSON is compact: at most one space
// between its tokens, none around the whole value.
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"

namespace peregrine {

inline constexpr int64_t kMaxSchemaRepeat = 1000;
inline constexpr size_t kMaxSchemaDepth = 64;

// GBNF text of the schema's grammar (rule `root`). Throws GrammarError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// json_schema_to_gbnf, compiled.
Grammar compile_json_schema(const nlohmann::ordered_json& schema);
// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

// An ECMAScript regular expression (JSON Schema's `pattern`: it may match anywhere unless anchored
// with ^ and $) as a GBNF expression for the JSON-encoded string contents between the quotes.
// Supported: literals and escapes, classes with ranges and negation, \d \w \s \D \W \S, ., groups
// ((...), (?:...), (?<name>...)), |, * + ? {m} {m,} {m,n} (lazy forms too), ^ at the start and $
// at the end. Throws GrammarError("json schema: pattern ...") for anything else (backreferences,
// lookaround, \b).
std::string regex_to_gbnf(const std::string& pattern);

// A GBNF string literal that matches exactly `bytes`.
std::string gbnf_literal(const std::string& bytes);

}  // namespace peregrine
