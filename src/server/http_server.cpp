#include "server/http_server.h"

#include <httplib.h>

#include <ctime>
#include <set>
#include <thread>

#include "server/api_error.h"
#include "server/auth.h"
#include "server/http_reply.h"
#include "server/json_fields.h"
#include "server/sse.h"
#include "util/error.h"

namespace peregrine::server {
namespace {

// httplib's stop() also aborts every response still being streamed (its chunked writer checks
// for shutdown), so draining needs two separate steps, which the listening socket (protected
// in httplib::Server) allows.
class DrainableServer : public httplib::Server {
 public:
  // No new connections: accept() fails, the accept loop closes the socket and waits for the
  // connections in progress, whose responses keep streaming.
  void stop_accepting() {
    const socket_t s = svr_sock_.load();
    if (s != INVALID_SOCKET) ::shutdown(s, SHUT_RDWR);
  }
  // After the last response: keep-alive connections close after their current wait.
  void mark_stopped() { svr_sock_.store(INVALID_SOCKET); }
};

// Runs a handler, turning every exception into an OpenAI error response (never a crash).
template <class Fn>
void guarded(httplib::Response& res, Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const std::exception& e) {
    send_error(res, server_error(std::string("internal error: ") + e.what()));
  }
}

const char* kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)),
      http_(std::make_unique<DrainableServer>()),
      metrics_(std::make_shared<Metrics>()),
      access_log_(options_.log_prompts),
      admission_(options_.max_queue),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  const int threads = options_.http_threads;
  // httplib's API hands over the queue as a raw pointer it then owns.
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_max_count(100000);
  http_->set_keep_alive_timeout(5);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);
  http_->set_tcp_nodelay(true);
  http_->set_pre_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    access_log_.begin(res);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_->count_http(res.status);
    access_log_.end(req, res);
  });
  // Errors httplib produces itself (unknown route, body too large, bad HTTP) get an OpenAI body.
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, not_found(req.path));
    } else if (res.status == 413) {
      send_error(res, payload_too_large(options_.max_body_bytes));
    } else {
      send_json(res, res.status, ApiError(res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error").body());
    }
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, server_error("internal error"));
  });
  install_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::install_routes() {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Every route answers every method: the wrong one gets 405 with Allow, not httplib's 404.
  auto route = [this](const std::string& pattern, const std::string& allowed, Handler handler) {
    for (const char* method : kMethods) {
      const bool ok = allowed == method;
      Handler h = [ok, allowed, handler, method](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
          if (!ok) {
            res.set_header("Allow", allowed);
            throw method_not_allowed(method, req.path);
          }
          handler(req, res);
        });
      };
      const std::string m = method;
      if (m == "GET") http_->Get(pattern, h);
      else if (m == "POST") http_->Post(pattern, h);
      else if (m == "PUT") http_->Put(pattern, h);
      else if (m == "PATCH") http_->Patch(pattern, h);
      else if (m == "DELETE") http_->Delete(pattern, h);
      else http_->Options(pattern, h);
    }
  };
  route("/health", "GET", [this](const httplib::Request&, httplib::Response& res) {
    if (model_.load() == nullptr || draining_.load()) throw not_ready();
    send_json(res, 200, {{"status", "ok"}});
  });
  route("/metrics", "GET", [this](const httplib::Request&, httplib::Response& res) {
    ServingModel* m = model_.load();
    std::optional<EngineStats> stats;
    if (m != nullptr) stats = m->engine().stats();
    res.set_content(metrics_->render(stats ? &*stats : nullptr), "text/plain; version=0.0.4; charset=utf-8");
  });
  route("/v1/models", "GET", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res, nullptr); });
  route(R"(/v1/models/(.+))", "GET", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    handle_models(req, res, &id);
  });
  route("/v1/completions", "POST", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::Completions);
  });
  route("/v1/chat/completions", "POST", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::ChatCompletions);
  });
  route("/tokenize", "POST", [this](const httplib::Request& req, httplib::Response& res) { handle_tokenize(req, res); });
  route("/detokenize", "POST", [this](const httplib::Request& req, httplib::Response& res) { handle_detokenize(req, res); });
}

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    if (port < 0) throw UsageError("cannot bind to " + options_.host + " on any port");
  } else if (!http_->bind_to_port(options_.host, port)) {
    throw UsageError("cannot bind to " + options_.host + ":" + std::to_string(port) + " (in use, or not an address here)");
  }
  return port;
}

void HttpServer::listen() { http_->listen_after_bind(); }

void HttpServer::set_model(ServingModel* model) { model_.store(model); }

ServingModel& HttpServer::ready_model() const {
  ServingModel* m = model_.load();
  if (m == nullptr || draining_.load()) throw not_ready();
  return *m;
}

void HttpServer::check_auth(const httplib::Request& req) const {
  if (!options_.api_key) return;
  if (!bearer_matches(req.get_header_value("Authorization"), *options_.api_key)) throw unauthorized();
}

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res, const std::string* id) {
  check_auth(req);
  ServingModel& m = ready_model();
  const nlohmann::json card = {{"id", m.name()},          {"object", "model"},
                               {"created", created_},     {"owned_by", "peregrine"},
                               {"root", m.name()},        {"max_model_len", m.context_length()}};
  if (id != nullptr) {
    if (*id != m.name()) throw model_not_found(*id);
    send_json(res, 200, card);
    return;
  }
  send_json(res, 200, {{"object", "list"}, {"data", nlohmann::json::array({card})}});
}

void HttpServer::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  check_auth(req);
  ServingModel& m = ready_model();
  const nlohmann::json body = parse_body(req.body);
  if (auto model = read_string(body, "model"); model && *model != m.name()) throw model_not_found(*model);
  std::vector<TokenId> ids;
  if (body.contains("messages")) {
    nlohmann::json chat = body;
    chat["model"] = m.name();
    const GenerationRequest r = parse_chat_request(chat);
    const std::string text = m.render_chat(r.messages, r.add_generation_prompt);
    ids = m.tokenize_prompt(text, read_bool(body, "add_special_tokens").value_or(false));
  } else {
    auto prompt = read_string(body, "prompt");
    if (!prompt) throw invalid_request("'prompt' (a string) or 'messages' is required", "prompt");
    ids = m.tokenize_prompt(*prompt, read_bool(body, "add_special_tokens").value_or(true));
  }
  send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m.context_length()}});
}

void HttpServer::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  check_auth(req);
  ServingModel& m = ready_model();
  const nlohmann::json body = parse_body(req.body);
  if (auto model = read_string(body, "model"); model && *model != m.name()) throw model_not_found(*model);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw invalid_request("'tokens' (a list of token ids) is required", "tokens");
  std::vector<TokenId> ids;
  for (const auto& v : *it) ids.push_back(static_cast<TokenId>(as_int(v, "tokens", 0, m.tokenizer().n_vocab() - 1)));
  send_json(res, 200, {{"prompt", m.tokenizer().decode(ids)}});
}

void HttpServer::register_job(GenerationJob* job) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_.insert(job);
}

void HttpServer::unregister_job(GenerationJob* job) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_.erase(job);
}

int64_t HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  return static_cast<int64_t>(jobs_.size());
}

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  draining_.store(true);
  auto& server = static_cast<DrainableServer&>(*http_);
  server.stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    for (GenerationJob* job : jobs_) job->cancel();
  }
  // Cancelled streams end within a step; a client that stopped reading could hold its request
  // until the write timeout, so do not wait for it forever.
  const auto hard_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (in_flight() > 0 && std::chrono::steady_clock::now() < hard_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server.mark_stopped();
}

}  // namespace peregrine::server
