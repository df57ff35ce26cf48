#pragma once
// Writing JSON bodies and OpenAI error objects into cpp-httplib responses.
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace httplib {
struct Response;
}

namespace peregrine::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body);
// The error's status and body; 429 adds Retry-After.
void send_error(httplib::Response& res, const ApiError& e);

}  // namespace peregrine::server
