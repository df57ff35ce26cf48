#include "server/http_server.h"

#include <malloc.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cstdio>
#include <ctime>
#include <thread>
#include <vector>

#include "server/access_policy.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/http_connection.h"
#include "server/json_fields.h"
#include "server/offloaded_response.h"
#include "util/error.h"

namespace peregrine::server {
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpServer::Io {
  ConnectionSettings settings;
  ConnectionRegistry connections;
  std::shared_ptr<WakeHub> wake_hub = std::make_shared<WakeHub>();
  net::io_context ioc;  // after the registry: its handlers hold the connections
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::steady_timer accept_retry{acceptor.get_executor()};
};

namespace {

enum class RouteId {
  Health,
  Metrics,
  Models,
  Model,
  Completions,
  Chat,
  Tokenize,
  Detokenize,
  Page,
  Asset,
  LoginAsset,
  Login,
  Logout,
  Events,
  Render,
  LabInfo,
  LabSizes,
  LabPlan,
  LabRun
};

struct Route {
  RouteId id;
  const char* method;
  bool auth;          // needs the API key (when the server has one): Bearer, or the page's session
  bool model;         // answers 503 until the model is ready
  bool json = false;  // the body is JSON: Content-Type application/json required
};

constexpr std::string_view kModelPrefix = "/v1/models/";
constexpr std::string_view kWebAssetPrefix = "/webui/";
constexpr std::string_view kLabPrefix = "/v1/lab/";

// Paths are matched as sent (not decoded); only a model id is decoded.
std::optional<Route> find_route(std::string_view path) {
  if (path == "/health") return Route{RouteId::Health, "GET", false, false};
  if (path == "/metrics") return Route{RouteId::Metrics, "GET", false, false};
  if (path == "/v1/models") return Route{RouteId::Models, "GET", true, true};
  if (path.size() > kModelPrefix.size() && path.starts_with(kModelPrefix))
    return Route{RouteId::Model, "GET", true, true};
  if (path == "/v1/completions") return Route{RouteId::Completions, "POST", true, true, true};
  if (path == "/v1/chat/completions") return Route{RouteId::Chat, "POST", true, true, true};
  if (path == "/tokenize") return Route{RouteId::Tokenize, "POST", true, true, true};
  if (path == "/detokenize") return Route{RouteId::Detokenize, "POST", true, true, true};
  if (path == "/" || path == "/index.html") return Route{RouteId::Page, "GET", true, false};
  if (path == "/webui/login") return Route{RouteId::Login, "POST", true, false};
  if (path == "/webui/logout") return Route{RouteId::Logout, "POST", false, false};
  if (path == "/webui/login.js" || path == "/webui/login.css") return Route{RouteId::LoginAsset, "GET", false, false};
  if (path.starts_with(kWebAssetPrefix)) return Route{RouteId::Asset, "GET", true, false};
  if (path == "/v1/engine/events") return Route{RouteId::Events, "GET", true, true};
  if (path == "/v1/chat/render") return Route{RouteId::Render, "POST", true, true, true};
  if (path == "/v1/lab") return Route{RouteId::LabInfo, "GET", true, true};
  if (path == "/v1/lab/kv-sizes") return Route{RouteId::LabSizes, "POST", true, true, true};
  if (path == "/v1/lab/plan") return Route{RouteId::LabPlan, "POST", true, true, true};
  if (path.starts_with(kLabPrefix) && Lab::is_run(path.substr(kLabPrefix.size()))) {
    return Route{RouteId::LabRun, "POST", true, true, true};
  }
  return std::nullopt;
}

// Routes whose work depends on the body (JSON, templates, tokenizing, grammars): prepared on the
// WorkPool, never on an I/O thread.
bool prepared_elsewhere(RouteId id) {
  return id == RouteId::Completions || id == RouteId::Chat || id == RouteId::Tokenize || id == RouteId::Detokenize ||
         id == RouteId::Render || id == RouteId::LabSizes || id == RouteId::LabPlan || id == RouteId::LabRun;
}

// A body this large is prepared in the WorkPool's heavy lane (never on every preparing thread
// while ordinary requests wait), and gives its memory back to the system when done (glibc keeps
// freed memory otherwise: a 7 MB body of 250 000 chat messages peaks at hundreds of MB of parsed
// JSON).
constexpr size_t kLargeBodyBytes = size_t{1} << 20;

// The preparing threads run below the engine's and the I/O threads' priority (Linux nice values
// are per thread): on a machine short of cores, heavy requests wait for CPU, streams do not.
constexpr int kPrepareNice = 5;

bool method_allowed(const Route& route, std::string_view method) {
  return method == route.method || (method == "HEAD" && std::string_view(route.method) == "GET");
}

// Routes that exist only with the web page (--no-webui: 404), the lab's included.
bool web_route(RouteId id) {
  return id == RouteId::Page || id == RouteId::Asset || id == RouteId::LoginAsset || id == RouteId::Login ||
         id == RouteId::Logout || id == RouteId::LabInfo || id == RouteId::LabSizes || id == RouteId::LabPlan ||
         id == RouteId::LabRun;
}

// Token lists given to /detokenize: as long as the context, and never fewer than this.
constexpr int64_t kMinDetokenizeTokens = 1 << 16;

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)),
      metrics_(std::make_shared<Metrics>()),
      access_log_(options_.log_prompts),
      admission_(options_.max_queue),
      access_(options_.host, options_.allowed_hosts, options_.cors_origins),
      created_(static_cast<int64_t>(std::time(nullptr))),
      lab_(LabOptions{options_.machine_roof, options_.lab_proposers, options_.lab_proposer}),
      prepare_pool_(std::make_unique<WorkPool>(options_.prepare_threads, options_.prepare_queue, kPrepareNice)),
      lab_pool_(std::make_unique<WorkPool>(1, 1, kPrepareNice)),
      io_(std::make_unique<Io>()) {
  ConnectionSettings& s = io_->settings;
  s.limits = options_.limits;
  s.request_timeout = options_.request_timeout;
  s.idle_timeout = options_.idle_timeout;
  s.write_timeout = options_.write_timeout;
  s.body_budget = std::make_shared<BodyBudget>(options_.max_inflight_body_bytes);
}

HttpServer::~HttpServer() {
  // The engine may still call wake-ups while the loop's handlers (and connections) are destroyed.
  io_->wake_hub->close();
  io_.reset();
}

int HttpServer::bind() {
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  boost::system::error_code ec;
  tcp::resolver resolver(io_->ioc);
  const auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) throw UsageError("cannot bind to " + where + ": " + ec.message());
  tcp::acceptor& a = io_->acceptor;
  for (const auto& entry : endpoints) {
    const tcp::endpoint e = entry.endpoint();
    a.open(e.protocol(), ec);
    if (ec) continue;
    a.set_option(net::socket_base::reuse_address(true), ec);
    a.bind(e, ec);
    if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) return a.local_endpoint().port();
    a.close();
  }
  throw UsageError("cannot bind to " + where + " (in use, or not an address here)");
}

void HttpServer::listen() {
  net::post(io_->acceptor.get_executor(), [this] { accept(); });
  // A handler that throws (out of memory, say) loses its connection, not the server.
  auto run = [this] {
    while (true) {
      try {
        io_->ioc.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[serve] error in the HTTP loop: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < options_.io_threads; ++i) threads.emplace_back(run);
  run();
  for (std::thread& t : threads) t.join();
}

// Runs on the acceptor's strand.
void HttpServer::accept() {
  if (!io_->acceptor.is_open()) return;
  io_->acceptor.async_accept(net::make_strand(io_->ioc), [this](const boost::system::error_code& ec,
                                                                tcp::socket socket) {
    if (!io_->acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors (or a connection reset while queued): pause instead of spinning.
      io_->accept_retry.expires_after(std::chrono::milliseconds(50));
      io_->accept_retry.async_wait([this](const boost::system::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    auto connection = std::make_shared<Connection>(
        std::move(socket), io_->settings, static_cast<RequestHandler&>(*this), io_->wake_hub, io_->connections);
    if (static_cast<int64_t>(io_->connections.size()) >= options_.max_connections) {
      connection->refuse_at_once(error_response(ApiError(
          503,
          "The server has " + std::to_string(options_.max_connections) + " open connections, its limit; retry later",
          "server_error", std::nullopt, "too_many_connections")));
    } else {
      connection->start();
    }
    accept();
  });
}

void HttpServer::set_model(ServingModel* model) { model_.store(model); }

ServingModel& HttpServer::ready_model() const {
  ServingModel* m = model_.load();
  if (m == nullptr || draining_.load()) throw not_ready();
  return *m;
}

void HttpServer::check_auth(const HttpRequest& req, bool allow_cookie) const {
  if (!options_.api_key) return;
  // The header's bytes exactly as sent: nothing decoded, nothing cut; one Authorization only.
  const std::optional<std::string_view> header = req.field("Authorization");
  if (header && req.field_count("Authorization") == 1 && bearer_matches(*header, *options_.api_key)) return;
  if (allow_cookie && !header && web_session_matches(req)) return;
  throw unauthorized();
}

std::optional<HttpResponse> HttpServer::screen(const HttpRequest& head) {
  try {
    access_.check_host(head);
    const std::optional<Route> route = find_route(head.path);
    if (!route) {
      access_.check_origin(head);
      throw not_found(head.path);
    }
    if (web_route(route->id) && !options_.webui) throw not_found(head.path);
    if (std::optional<HttpResponse> preflight = access_.preflight(head, std::string(route->method) + ", OPTIONS")) {
      return preflight;
    }
    access_.check_origin(head);
    if (!method_allowed(*route, head.method)) {
      HttpResponse r = error_response(method_not_allowed(head.method, head.path));
      r.headers.emplace_back("Allow", route->method);
      return r;
    }
    // The page's session cookie stands for the key, except to open a session; a request that
    // changes something must also come from the page itself (its Origin), never from a form or
    // script of another site or port.
    const bool reads = head.method == "GET" || head.method == "HEAD";
    const bool allow_cookie = route->id != RouteId::Login && (reads || access_.same_origin(head));
    try {
      if (route->auth) check_auth(head, allow_cookie);
    } catch (const ApiError&) {
      if (route->id == RouteId::Page) return login_page();  // a person with a browser: ask for the key
      throw;
    }
    if (route->json) require_json_content_type(head);
    if (route->model) ready_model();
    return std::nullopt;
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

HeaderList HttpServer::response_headers(const HttpRequest& head) { return access_.cors_headers(head); }

Reply HttpServer::handle(HttpRequest request, RequestLog& log, const Wakeup& wakeup) {
  if (std::optional<HttpResponse> refusal = screen(request)) return *refusal;
  if (prepared_elsewhere(find_route(request.path)->id)) return prepare_elsewhere(std::move(request), wakeup);
  return answer(request, log, wakeup);
}

Reply HttpServer::answer(const HttpRequest& request, RequestLog& log, const Wakeup& wakeup) {
  try {
    return route(request, log, wakeup);
  } catch (const ApiError& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response(server_error(std::string("internal error: ") + e.what()));
  }
}

Reply HttpServer::prepare_elsewhere(HttpRequest request, const Wakeup& wakeup) {
  const bool large = request.body.size() >= kLargeBodyBytes;
  auto work = [this, request = std::move(request), wakeup, large](RequestLog& log) mutable {
    Reply reply = answer(request, log, wakeup);
    request = HttpRequest{};  // the body goes before the memory is given back
    if (large) malloc_trim(0);
    return reply;
  };
  if (auto pending = OffloadedResponse::start(*prepare_pool_, std::move(work), wakeup, large)) return pending;
  HttpResponse busy =
      error_response(ApiError(503,
                              "The server is preparing " + std::to_string(prepare_pool_->max_waiting()) +
                                  " requests already, its limit; retry later",
                              "server_error", std::nullopt, "too_many_requests"));
  busy.headers.emplace_back("Retry-After", "1");
  return busy;
}

Reply HttpServer::route(const HttpRequest& request, RequestLog& log, const Wakeup& wakeup) {
  switch (find_route(request.path)->id) {
    case RouteId::Health:
      if (model_.load() == nullptr || draining_.load()) throw not_ready();
      return json_response(200, {{"status", "ok"}});
    case RouteId::Metrics: {
      ServingModel* m = model_.load();
      std::optional<EngineStats> stats;
      if (m != nullptr) stats = m->engine().stats();
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_->render(stats ? &*stats : nullptr);
      return r;
    }
    case RouteId::Models:
      return handle_models(nullptr);
    case RouteId::Model: {
      const std::string_view raw = std::string_view(request.path).substr(kModelPrefix.size());
      const std::string id = percent_decode(raw).value_or(std::string(raw));
      return handle_models(&id);
    }
    case RouteId::Completions:
      return handle_generation(request, log, wakeup, Endpoint::Completions);
    case RouteId::Chat:
      return handle_generation(request, log, wakeup, Endpoint::ChatCompletions);
    case RouteId::Tokenize:
      return handle_tokenize(request);
    case RouteId::Detokenize:
      return handle_detokenize(request);
    case RouteId::Page:
      return web_asset_response("index.html");
    case RouteId::Asset:
    case RouteId::LoginAsset:
      return web_asset_response(std::string_view(request.path).substr(kWebAssetPrefix.size()));
    case RouteId::Login:
      return open_web_session();
    case RouteId::Logout:
      return close_web_session(request);
    case RouteId::Events:
      if (request.method == "HEAD") return event_stream_head();  // the head alone, no stream
      return handle_engine_events(wakeup);
    case RouteId::Render:
      return handle_chat_render(request);
    case RouteId::LabInfo:
      return json_response(200, lab_.info(ready_model()));
    case RouteId::LabSizes:
      return json_response(200, lab_.kv_sizes(ready_model(), parse_body(request.body)));
    case RouteId::LabPlan:
      return json_response(200, lab_.plan(ready_model(), parse_body(request.body)));
    case RouteId::LabRun:
      return handle_lab_run(request, std::string_view(request.path).substr(kLabPrefix.size()), wakeup);
  }
  throw server_error("unrouted request");
}

void HttpServer::completed(const RequestLog& log) {
  metrics_->count_http(log.status);
  access_log_.write(log);
}

HttpResponse HttpServer::handle_models(const std::string* id) {
  ServingModel& m = ready_model();
  const nlohmann::json card = {{"id", m.name()},          {"object", "model"}, {"created", created_},
                               {"owned_by", "peregrine"}, {"root", m.name()},  {"max_model_len", m.context_length()}};
  if (id != nullptr) {
    if (*id != m.name()) throw model_not_found(*id);
    return json_response(200, card);
  }
  return json_response(200, {{"object", "list"}, {"data", nlohmann::json::array({card})}});
}

HttpResponse HttpServer::handle_tokenize(const HttpRequest& req) {
  ServingModel& m = ready_model();
  nlohmann::json body = parse_body(req.body);
  if (auto model = read_string(body, "model"); model && *model != m.name()) throw model_not_found(*model);
  std::vector<TokenId> ids;
  if (body.contains("messages")) {
    body["model"] = m.name();  // optional here; the chat parser wants it
    const GenerationRequest r = parse_chat_request(body);
    ids = m.preparer().chat_prompt(r.messages, r.add_generation_prompt).tokens;
    const TokenId bos = m.tokenizer().bos();
    if (read_bool(body, "add_special_tokens").value_or(false) && m.tokenizer().add_bos() && bos >= 0) {
      ids.insert(ids.begin(), bos);
    }
  } else {
    auto prompt = read_string(body, "prompt");
    if (!prompt) throw invalid_request("'prompt' (a string) or 'messages' is required", "prompt");
    ids = m.preparer().tokenize_prompt(*prompt, read_bool(body, "add_special_tokens").value_or(true));
  }
  return json_response(200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m.context_length()}});
}

HttpResponse HttpServer::handle_detokenize(const HttpRequest& req) {
  ServingModel& m = ready_model();
  const nlohmann::json body = parse_body(req.body);
  if (auto model = read_string(body, "model"); model && *model != m.name()) throw model_not_found(*model);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw invalid_request("'tokens' (a list of token ids) is required", "tokens");
  const int64_t max_tokens = std::max(m.context_length(), kMinDetokenizeTokens);
  if (static_cast<int64_t>(it->size()) > max_tokens) {
    throw invalid_request("'tokens' holds at most " + std::to_string(max_tokens) + " ids", "tokens");
  }
  std::vector<TokenId> ids;
  for (const auto& v : *it) ids.push_back(static_cast<TokenId>(as_int(v, "tokens", 0, m.tokenizer().n_vocab() - 1)));
  return json_response(200, {{"prompt", m.tokenizer().decode(ids)}});
}

int64_t HttpServer::in_flight() const { return static_cast<int64_t>(jobs_.size()); }

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  draining_.store(true);
  live_feed_.wake_all();  // live-view streams end at their next poll
  // Requests still waiting to be prepared get 503 (draining); those being prepared finish, so
  // every generation they start is in jobs_ below, and none starts later.
  prepare_pool_->stop();
  lab_.stop();  // a lab run ends at its next step
  lab_pool_->stop();
  net::post(io_->acceptor.get_executor(), [this] {
    boost::system::error_code ec;
    io_->acceptor.close(ec);  // new connections are refused from here on
    io_->accept_retry.cancel();
  });
  const auto deadline = Clock::now() + grace;
  while (in_flight() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  jobs_.cancel_all();
  // Cancelled streams end within a step; a client that stopped reading holds its request until
  // the write timeout, so do not wait for it forever.
  const auto hard_deadline = Clock::now() + std::chrono::seconds(5);
  while (in_flight() > 0 && Clock::now() < hard_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Idle keep-alive connections have nothing to finish: close them all; listen() returns when
  // the last one is gone (or stop the loop if one lingers).
  io_->connections.close_all();
  const auto close_deadline = Clock::now() + std::chrono::seconds(2);
  while (io_->connections.size() > 0 && Clock::now() < close_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (io_->connections.size() > 0) io_->ioc.stop();
}

}  // namespace peregrine::server
