#pragma once
// Typed, validated reads of optional fields from a JSON request body. A field that is absent or
// null reads as nullopt; one of the wrong type or out of range throws ApiError 400 naming it.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace peregrine::server {

std::optional<bool> read_bool(const nlohmann::json& body, const char* name);
// Integers only (a float with an integral value such as 5.0 is accepted, 5.5 is not).
std::optional<int64_t> read_int(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi);
// Finite numbers in [lo, hi].
std::optional<double> read_number(const nlohmann::json& body, const char* name, double lo, double hi);
std::optional<std::string> read_string(const nlohmann::json& body, const char* name);

// Same checks for a value that is not a top-level field (array items): `param` names it.
int64_t as_int(const nlohmann::json& value, const std::string& param, int64_t lo, int64_t hi);

}  // namespace peregrine::server
