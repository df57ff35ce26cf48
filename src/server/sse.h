#pragma once
// Server-Sent Events framing as OpenAI streams it: every event is one `data: <json>\n\n`, and
// the stream ends with `data: [DONE]\n\n`.
#include <string>

#include <nlohmann/json.hpp>

namespace peregrine::server {

std::string sse_event(const nlohmann::json& payload);  // "data: {...}\n\n" (compact JSON)
std::string sse_done();                                // "data: [DONE]\n\n"

// Compact JSON; any invalid UTF-8 that slipped into a string is replaced, never thrown on.
std::string dump_json(const nlohmann::json& j);

}  // namespace peregrine::server
