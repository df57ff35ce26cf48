#include "server/sse.h"

namespace peregrine::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace peregrine::server
