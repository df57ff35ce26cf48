#include "server/http_reply.h"

#include <httplib.h>

#include "server/sse.h"

namespace peregrine::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 429) res.set_header("Retry-After", "1");
  send_json(res, e.status(), e.body());
}

}  // namespace peregrine::server
