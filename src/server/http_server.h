#pragma once
// The OpenAI-compatible HTTP server (cpp-httplib): routes, API-key check, body limit, queue
// limit, access log and metrics, on top of one ServingModel. The socket is bound before the
// model loads, so /health can answer 503 until set_model() and 200 after.
//
// Lifecycle: bind() -> listen() on some thread (blocks) -> set_model() once loaded ->
// shutdown(grace) from another thread: stop accepting, wait up to `grace` for in-flight requests,
// cancel the rest (each stream still ends with its finish chunk and [DONE]), then listen()
// returns.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "server/access_log.h"
#include "server/metrics.h"
#include "server/request_stream.h"
#include "server/serving_model.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace peregrine::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                         // 0: an ephemeral port
  std::optional<std::string> api_key;      // required on /v1/*, /tokenize, /detokenize when set
  std::string served_model_name;
  int64_t max_queue = 256;                 // sequences waiting for admission before 429
  bool log_prompts = false;
  size_t max_body_bytes = 8 << 20;         // 413 beyond
  int http_threads = 512;                  // connections served at once (streams hold one each)
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws UsageError if it cannot.
  int bind();
  // Serves until shutdown(); call after bind(), on its own thread.
  void listen();
  // The model is ready: generation routes start answering. `model` must outlive the server's
  // listen() and must stay until shutdown() has returned.
  void set_model(ServingModel* model);
  // Stops accepting, lets in-flight requests finish for up to `grace`, then cancels them.
  // Returns once no generation is in flight (listen() returns soon after).
  void shutdown(std::chrono::milliseconds grace);
  int64_t in_flight() const;

  Metrics& metrics() { return *metrics_; }

 private:
  void install_routes();
  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res, const std::string* id);
  void check_auth(const httplib::Request& req) const;
  ServingModel& ready_model() const;  // throws ApiError 503 while loading or stopping

  class JobRegistration;
  void register_job(GenerationJob* job);
  void unregister_job(GenerationJob* job);

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::shared_ptr<Metrics> metrics_;
  AccessLog access_log_;
  AdmissionCounter admission_;
  std::atomic<ServingModel*> model_{nullptr};
  std::atomic<bool> draining_{false};
  int64_t created_ = 0;
  mutable std::mutex jobs_mu_;
  std::set<GenerationJob*> jobs_;  // in flight; registered by the handlers that own them
};

}  // namespace peregrine::server
