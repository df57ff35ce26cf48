#pragma once
// The OpenAI-compatible HTTP server: HTTP/1.1 on Boost.Asio with a few I/O threads (one strand
// per connection, see http_connection.h), routes, API-key check, limits, access log and
// metrics, on top of one ServingModel. The socket is bound before the model loads, so /health
// can answer 503 until set_model() and 200 after.
//
// Every limit is checked before the work it guards: header size and field count while the head
// is read; Host, Origin (access_policy.h), route, method, API key, Content-Type and a declared
// body size before any body byte is read; the body size (Content-Length or chunked) while it is
// read, and the bytes all bodies hold at once (503 beyond max_inflight_body_bytes) before they
// are buffered; the whole request within request_timeout; open connections (503 beyond
// max_connections); sequences waiting for the engine (429 beyond max_queue; 400 for a request
// that could never fit the queue); prompt text against the context before it is tokenized
// (ServingModel); JSON nesting before the body is parsed (openai_request.h); requests waiting for
// a preparing thread (503 beyond prepare_queue).
//
// Threads: the I/O threads only read, route, screen and write. Everything a request body makes the
// server compute (parsing the JSON, rendering the chat template, tokenizing, compiling a grammar,
// decoding token ids) runs on the WorkPool's prepare_threads, so a heavy request never holds
// /health, the metrics or another client's stream; generation runs on the engine's thread.
//
// Lifecycle: bind() -> listen() on some thread (blocks) -> set_model() once loaded ->
// shutdown(grace) from another thread: stop accepting, wait up to `grace` for in-flight requests,
// cancel the rest (each stream still ends with its finish chunk and [DONE]), close every
// connection, then listen() returns.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/access_log.h"
#include "server/access_policy.h"
#include "server/engine_view.h"
#include "server/http_handler.h"
#include "server/live_feed.h"
#include "server/metrics.h"
#include "server/request_stream.h"
#include "server/serving_model.h"
#include "server/web_sessions.h"
#include "server/work_pool.h"

namespace peregrine::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: an ephemeral port
  std::optional<std::string> api_key;  // required on /v1/*, /tokenize, /detokenize when set
  std::string served_model_name;
  int64_t max_queue = 256;  // sequences waiting for admission before 429
  bool log_prompts = false;
  HttpLimits limits;                                 // header bytes and fields, body bytes
  int64_t max_connections = 1024;                    // open connections; beyond, 503 and close
  std::chrono::milliseconds request_timeout{30000};  // whole request (head + body); 408 beyond
  std::chrono::milliseconds idle_timeout{5000};      // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{30000};    // a write that does not complete: connection dropped
  int io_threads = 2;                                // threads running the event loop
  int prepare_threads = 2;                           // threads preparing requests (WorkPool)
  size_t prepare_queue = 256;                        // requests waiting for them; beyond, 503 + Retry-After
  bool webui = true;                                 // the web page at / (and /webui/*); off: 404
  std::optional<MachineRoof> machine_roof;           // drawn under the live view's steps when known
  size_t max_inflight_body_bytes = 256 << 20;        // request-body bytes held at once; 503 beyond
  std::vector<std::string> allowed_hosts;            // Host names beyond the defaults ("*": any)
  std::vector<std::string> cors_origins;             // cross-origin callers allowed ("*": any)
  size_t live_view_queue_bytes = 64 << 10;           // a live-view viewer's unsent bytes before frames drop
  std::chrono::milliseconds live_view_stall{10000};  // ... and how long it may stay so before it is dropped
};

class HttpServer : private RequestHandler {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws UsageError if it cannot.
  int bind();
  // Serves until shutdown(); call after bind(), on its own thread.
  void listen();
  // The model is ready: generation routes start answering. `model` must outlive the server's
  // listen() and must stay until shutdown() has returned.
  void set_model(ServingModel* model);
  // Stops accepting, lets in-flight requests finish for up to `grace`, then cancels them and
  // closes every connection. Returns once no generation is in flight.
  void shutdown(std::chrono::milliseconds grace);
  // The model can serve no more (its processes failed): from now on /health and new requests get
  // 503, as while draining; shutdown() follows.
  void refuse_new_work() { draining_.store(true); }
  int64_t in_flight() const;

  Metrics& metrics() { return *metrics_; }

 private:
  class GenerationResponse;
  class EngineEventsResponse;

  // RequestHandler (called by connections)
  std::optional<HttpResponse> screen(const HttpRequest& head) override;
  HeaderList response_headers(const HttpRequest& head) override;
  Reply handle(HttpRequest request, RequestLog& log, const Wakeup& wakeup) override;
  void completed(const RequestLog& log) override;
  bool draining() const override { return draining_.load(); }

  Reply route(const HttpRequest& request, RequestLog& log, const Wakeup& wakeup);
  // route() with its errors turned into responses.
  Reply answer(const HttpRequest& request, RequestLog& log, const Wakeup& wakeup);
  // Runs answer() on the WorkPool; 503 with Retry-After when its queue is full.
  Reply prepare_elsewhere(HttpRequest request, const Wakeup& wakeup);
  Reply handle_generation(const HttpRequest& req, RequestLog& log, const Wakeup& wakeup, Endpoint endpoint);
  HttpResponse handle_tokenize(const HttpRequest& req);
  HttpResponse handle_detokenize(const HttpRequest& req);
  HttpResponse handle_models(const std::string* id);
  // The web page (http_webui.cpp): its files, the login page asked for without the key, the
  // live view's event stream and the rendered chat prompt.
  HttpResponse web_asset_response(std::string_view name) const;
  HttpResponse login_page() const;
  Reply handle_engine_events(const Wakeup& wakeup);
  HttpResponse handle_chat_render(const HttpRequest& req);
  bool web_session_matches(const HttpRequest& req) const;
  HttpResponse open_web_session();  // POST /webui/login (the key checked already)
  HttpResponse close_web_session(const HttpRequest& req);
  // The key from `Authorization: Bearer`, or (allow_cookie, no Authorization field) the page's
  // session cookie. Throws ApiError 401.
  void check_auth(const HttpRequest& req, bool allow_cookie = false) const;
  ServingModel& ready_model() const;  // throws ApiError 503 while loading or stopping

  void accept();

  ServerOptions options_;
  std::shared_ptr<Metrics> metrics_;
  AccessLog access_log_;
  AdmissionCounter admission_;
  AccessPolicy access_;
  WebSessions web_sessions_;
  JobSet jobs_;
  std::atomic<ServingModel*> model_{nullptr};
  std::atomic<bool> draining_{false};
  int64_t created_ = 0;
  LiveFeed live_feed_;  // before io_: viewers leave it when their connections go
  std::unique_ptr<WorkPool> prepare_pool_;  // before io_: connections drop their prepared replies first
  struct Io;
  std::unique_ptr<Io> io_;  // last: connections (and their jobs) go before everything above
};

}  // namespace peregrine::server
