#pragma once
// HTTP/1.1 messages as the server sees them, independent of the I/O library: a parsed request
// (head fields in order, raw target, body), a response to send, the limits a request must keep,
// and the exact bytes of a response head and of chunked framing (RFC 9112).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace peregrine::server {

// Checked while the request is read, before the work each one guards.
struct HttpLimits {
  size_t header_bytes = 16 << 10;  // request line + header fields (431 beyond)
  size_t header_fields = 100;      // header field lines (431 beyond)
  size_t body_bytes = 8 << 20;     // body after chunked decoding (413 beyond)
};

class BodyHold;  // server/body_budget.h

struct HttpRequest {
  std::string method;  // as sent: "GET"
  std::string target;  // the raw request-target, never decoded
  std::string path;    // target without query (absolute-form: its path), not decoded
  std::string authority;  // absolute-form: the target's host[:port], which stands for Host (RFC 9112 3.2.2)
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> fields;  // in order, names as sent
  std::string body;
  bool keep_alive = true;        // the client allows another request on this connection
  bool has_body = false;         // Content-Length > 0 or chunked
  bool expect_continue = false;  // "Expect: 100-continue"
  // The body's share of the server's in-flight body budget: given back when the last copy of the
  // request goes (null when there is no budget or no body).
  std::shared_ptr<BodyHold> body_hold;

  // The value of the first field named `name` (case-insensitive), if any.
  std::optional<std::string_view> field(std::string_view name) const;
  size_t field_count(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type/-Length/Connection
  std::string body;
};

HttpResponse json_response(int status, const nlohmann::json& body);
// The head of a Server-Sent Events stream (text/event-stream, not cached).
HttpResponse event_stream_head();
// The error's status and OpenAI body; 429 and 503 add Retry-After.
HttpResponse error_response(const ApiError& e);

// "Content-Length: n" framing. `close`: announce that the connection closes after it. `head_only`
// (a HEAD request): the head alone, with the Content-Length the body would have.
std::string serialize_response(const HttpResponse& r, int version, bool keep_alive, bool head_only);
// The head of a streamed response: chunked for HTTP/1.1; HTTP/1.0 gets the body until close.
std::string serialize_stream_head(const HttpResponse& r, int version, bool keep_alive);
std::string chunk(std::string_view data);  // one chunk ("" for no data: never the last chunk)
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

bool iequals(std::string_view a, std::string_view b);
// %XX decoding of a path segment; nullopt for a malformed escape or a decoded NUL.
std::optional<std::string> percent_decode(std::string_view s);

}  // namespace peregrine::server
