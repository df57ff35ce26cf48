// The web page's routes: GET / and /webui/* (the files built into the binary, under a strict
// content security policy), the login page a browser gets without the key and its session
// (POST /webui/login exchanges the key for an HttpOnly cookie, /webui/logout ends it),
// GET /v1/engine/events (the live view, Server-Sent Events) and POST /v1/chat/render (the prompt
// the chat template makes of a conversation).
#include "server/api_error.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/sse.h"
#include "server/webui_assets.h"

namespace peregrine::server {
namespace {

// Frames closer together than this are not sent (a wake-up that is not the feed's tick).
constexpr double kMinFrameGapS = 0.1;

// The page runs only its own files: no inline script or style, no plugins, fetches to this
// server only, never framed (clickjacking), no <base> or form posts elsewhere.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

HttpResponse asset_response(const WebAsset& asset, int status) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::string(asset.content_type);
  r.body = std::string(asset.bytes);
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "same-origin");
  return r;
}

}  // namespace

// One viewer of the live view: a frame per tick of the LiveFeed, each with the steps it has not
// seen. A slow client gets fewer frames, never a backlog: the connection polls again only once
// its previous write is out and its unsent bytes are under the limit, and a frame is built at
// poll time; a client that stops reading is dropped (backlog_limit).
class HttpServer::EngineEventsResponse final : public PendingResponse {
 public:
  EngineEventsResponse(HttpServer& server, ServingModel& model, uint64_t ticket)
      : server_(server), viewer_(model, *server.metrics_, server.options_.machine_roof), ticket_(ticket) {}
  ~EngineEventsResponse() override { server_.live_feed_.leave(ticket_); }

  std::optional<HttpResponse> stream_head() override { return event_stream_head(); }

  Step poll() override {
    Step step;
    if (server_.draining()) {
      step.done = true;
      return step;
    }
    const auto now = std::chrono::steady_clock::now();
    if (sent_any_ && std::chrono::duration<double>(now - last_frame_).count() < kMinFrameGapS) return step;
    sent_any_ = true;
    last_frame_ = now;
    step.data = "event: engine\n" + sse_event(viewer_.frame());
    return step;
  }

  // A viewer that does not read loses frames, then (still not reading) its slot.
  std::optional<BacklogLimit> backlog_limit() const override {
    return BacklogLimit{server_.options_.live_view_queue_bytes, server_.options_.live_view_stall};
  }
  void abandon() override {}
  void note(RequestLog&) const override {}

 private:
  HttpServer& server_;
  EngineViewer viewer_;
  uint64_t ticket_;
  bool sent_any_ = false;
  std::chrono::steady_clock::time_point last_frame_;
};

HttpResponse HttpServer::web_asset_response(std::string_view name) const {
  const WebAsset* asset = find_web_asset(name);
  if (asset == nullptr || name == "login.html") throw not_found("/webui/" + std::string(name));
  return asset_response(*asset, 200);
}

HttpResponse HttpServer::login_page() const {
  const WebAsset* asset = find_web_asset("login.html");
  if (asset == nullptr) return error_response(unauthorized());
  return asset_response(*asset, 401);
}

bool HttpServer::web_session_matches(const HttpRequest& req) const {
  if (req.field_count("Cookie") != 1) return false;
  const std::optional<std::string_view> token = cookie_value(*req.field("Cookie"), WebSessions::kCookie);
  return token && web_sessions_.valid(*token);
}

// The key was checked (Authorization: Bearer) by screen(): the page gets its session cookie.
HttpResponse HttpServer::open_web_session() {
  if (!options_.api_key) return json_response(200, {{"expires_in", nullptr}});  // nothing to open
  HttpResponse r = json_response(
      200, {{"expires_in", std::chrono::duration_cast<std::chrono::seconds>(WebSessions::kLifetime).count()}});
  r.headers.emplace_back("Set-Cookie", WebSessions::cookie_for(web_sessions_.open()));
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

HttpResponse HttpServer::close_web_session(const HttpRequest& req) {
  if (req.field_count("Cookie") == 1) {
    if (auto token = cookie_value(*req.field("Cookie"), WebSessions::kCookie)) web_sessions_.close(*token);
  }
  HttpResponse r = json_response(200, nlohmann::json::object());
  r.headers.emplace_back("Set-Cookie", WebSessions::expired_cookie());
  return r;
}

Reply HttpServer::handle_engine_events(const Wakeup& wakeup) {
  ServingModel& model = ready_model();
  const std::optional<uint64_t> ticket = live_feed_.join(wakeup);
  if (!ticket) {
    throw ApiError(429,
                   "The live view has " + std::to_string(LiveFeed::kMaxViewers) + " viewers, its limit; retry later",
                   "rate_limit_error", std::nullopt, "too_many_viewers");
  }
  return std::make_unique<EngineEventsResponse>(*this, model, *ticket);
}

// The conversation rendered as /v1/chat/completions would render it (same parsing, same
// template with the same tools, same checks), without generating: {"prompt": text, "tokens": count}.
HttpResponse HttpServer::handle_chat_render(const HttpRequest& req) {
  ServingModel& model = ready_model();
  nlohmann::json body = parse_body(req.body);
  if (!body.contains("model")) body["model"] = model.name();
  GenerationRequest request = parse_chat_request(body);
  restore_schema_order(request, req.body);  // tools render in the client's key order
  if (request.model != model.name()) throw model_not_found(request.model);
  const std::vector<PreparedPrompt> prompts = model.preparer().prepare(request);
  return json_response(200, {{"model", model.name()},
                             {"prompt", prompts.front().text},
                             {"tokens", prompts.front().tokens.size()},
                             {"max_model_len", model.context_length()}});
}

}  // namespace peregrine::server
