#pragma once
// API-key check for `Authorization: Bearer KEY`, in constant time with respect to the key's
// contents, so response timing reveals nothing about how much of a guess was right.
#include <optional>
#include <string_view>

namespace peregrine::server {

// True when `authorization_header` is exactly "Bearer " + expected_key ("bearer" in any case).
bool bearer_matches(std::string_view authorization_header, std::string_view expected_key);

// The value of cookie `name` in a Cookie header ("a=1; name=value"), as sent (not decoded).
std::optional<std::string_view> cookie_value(std::string_view cookie_header, std::string_view name);

// Compares every byte of both strings whatever differs (time depends on the lengths only).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace peregrine::server
