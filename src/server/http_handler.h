#pragma once
// What a connection (the transport: framing, deadlines, writes) and the server's routes say to
// each other. The connection asks screen() once the head is in, before reading any body; then
// handle() with the whole request. A reply is either a whole response or a PendingResponse whose
// bytes come later from another thread (a generation): its work calls wakeup(), and the
// connection then polls it on its own thread.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "server/access_log.h"
#include "server/http_message.h"

namespace peregrine::server {

class PendingResponse {
 public:
  virtual ~PendingResponse() = default;  // stops whatever work is still running

  // A streamed response's head (sent at once, body chunked after it); nullopt when the response
  // is sent whole once ready.
  virtual std::optional<HttpResponse> stream_head() = 0;

  struct Step {
    // A streamed response's head when stream_head() could not know it yet (the response was
    // being prepared on another thread): sent before `data`, once.
    std::optional<HttpResponse> head;
    std::string data;                   // stream bytes to send now (framing is the connection's)
    std::optional<HttpResponse> whole;  // the whole response, once ready (not streamed)
    bool done = false;                  // nothing more will come
  };
  // After wakeup() (and once right after the head): what there is to send.
  virtual Step poll() = 0;
  // A stream that may skip what it would send while its client is behind (the live view: a frame
  // is built at poll time, so a skipped poll is a dropped frame): the bytes it may have queued
  // (ours and the kernel's send queue) before polls are skipped, and how long it may stay over
  // that before the connection is dropped. nullopt: every poll is sent (a generation).
  struct BacklogLimit {
    size_t max_bytes;
    std::chrono::milliseconds max_stall;
  };
  virtual std::optional<BacklogLimit> backlog_limit() const { return std::nullopt; }
  // The client went away: stop the work now.
  virtual void abandon() = 0;
  // Token counts (and prompt) for the access log.
  virtual void note(RequestLog& log) const = 0;
};

using Reply = std::variant<HttpResponse, std::unique_ptr<PendingResponse>>;
using Wakeup = std::function<void()>;  // callable from any thread, any number of times

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // The head is in, the body is not: a refusal (unknown route, wrong method, API key, not
  // ready) or nullopt to go on and read the body.
  virtual std::optional<HttpResponse> screen(const HttpRequest& head) = 0;
  // Header fields every answer to this request carries, refusals included (CORS for a listed
  // origin); asked before screen().
  virtual std::vector<std::pair<std::string, std::string>> response_headers(const HttpRequest& head) {
    (void)head;
    return {};
  }
  virtual Reply handle(HttpRequest request, RequestLog& log, const Wakeup& wakeup) = 0;
  // The response was sent (or the client left): metrics and the access-log line.
  virtual void completed(const RequestLog& log) = 0;
  // While draining every response closes its connection.
  virtual bool draining() const = 0;
};

}  // namespace peregrine::server
