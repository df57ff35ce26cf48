#include "cli/tools/http_load.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

namespace peregrine::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Splits a Server-Sent Events byte stream into the payloads of its `data:` fields, one call per
// event (multi-line data joined with '\n', as the SSE spec says). Bytes arrive in arbitrary
// pieces, so a partial event waits in the buffer.
class SseSplitter {
 public:
  template <typename OnData>
  void feed(const char* data, size_t n, OnData&& on_data) {
    buffer_.append(data, n);
    while (true) {
      size_t end = buffer_.find("\n\n");
      size_t sep = 2;
      if (const size_t crlf = buffer_.find("\r\n\r\n"); crlf != std::string::npos && crlf < end) {
        end = crlf;
        sep = 4;
      }
      if (end == std::string::npos) return;
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + sep);
      std::string payload;
      bool has_data = false;
      size_t pos = 0;
      while (pos <= event.size()) {
        size_t eol = event.find('\n', pos);
        if (eol == std::string::npos) eol = event.size();
        std::string line = event.substr(pos, eol - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) {
          std::string value = line.substr(5);
          if (!value.empty() && value[0] == ' ') value.erase(0, 1);
          if (has_data) payload += '\n';
          payload += value;
          has_data = true;
        }
        pos = eol + 1;
      }
      if (has_data) on_data(payload);
    }
  }
  bool has_partial_event() const { return buffer_.find_first_not_of("\r\n") != std::string::npos; }

 private:
  std::string buffer_;
};

httplib::Client make_client(const LoadOptions& o) {
  httplib::Client client(o.endpoint.host, o.endpoint.port);
  const auto timeout = std::chrono::duration<double>(o.timeout_s);
  client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(std::min(timeout, std::chrono::duration<double>(10))));
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  client.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  client.set_keep_alive(true);
  if (!o.api_key.empty()) client.set_bearer_token_auth(o.api_key);
  return client;
}

std::string describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "connection failed (refused, or host unreachable)";
    case httplib::Error::ConnectionTimeout: return "connection timed out";
    case httplib::Error::Read: return "read failed (the server closed the connection or timed out)";
    case httplib::Error::Write: return "write failed (the server closed the connection)";
    case httplib::Error::Canceled: return "canceled";
    default: return httplib::to_string(e);
  }
}

// Streams one request to its end and fills `r`. `now_s` gives seconds since the run's start.
template <typename Now>
void stream_one(httplib::Client& client, const LoadOptions& o, const LoadRequest& lr, LoadResult& r, Now now_s) {
  httplib::Request req;
  req.method = "POST";
  req.path = o.endpoint.base_path + "/v1/completions";
  req.headers = {{"Accept", "text/event-stream"}};
  req.set_header("Content-Type", "application/json");
  req.body = lr.body;
  int status = 0;
  std::string error_body;
  bool done = false;
  SseSplitter sse;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    sse.feed(data, n, [&](const std::string& payload) {
      const double t = now_s();
      if (done) {
        r.error = "data after [DONE]";
        return;
      }
      if (payload == "[DONE]") {
        done = true;
        r.done_s = t;
        return;
      }
      const auto j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) {
        r.error = "malformed event: " + payload.substr(0, 200);
        return;
      }
      if (j.contains("error")) {
        r.error = "error event: " + j["error"].dump().substr(0, 300);
        return;
      }
      if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
        r.prompt_tokens = u->value("prompt_tokens", int64_t{-1});
        r.completion_tokens = u->value("completion_tokens", int64_t{-1});
      }
      if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
        r.chunk_times_s.push_back(t);
        for (const auto& choice : *c) {
          if (auto text = choice.find("text"); text != choice.end() && text->is_string()) r.text += text->get<std::string>();
          if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) r.finish_reason = f->get<std::string>();
        }
      }
    });
    return true;
  };
  r.sent_s = now_s();
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client.send(req, res, err);
  if (!sent) {
    r.error = "request failed: " + describe(err);
  } else if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 300);
  } else if (r.error.empty() && !done) {
    r.error = sse.has_partial_event() ? "stream ended inside an event" : "stream ended without [DONE]";
  } else if (r.error.empty() && r.chunk_times_s.empty()) {
    r.error = "stream carried no choices";
  }
  r.ok = r.error.empty();
  if (!r.ok && r.done_s == 0) r.done_s = now_s();
}

}  // namespace

HttpEndpoint parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  auto bad = [&](const std::string& why) {
    return std::runtime_error("--url '" + url + "': " + why + " (expected http://HOST:PORT)");
  };
  if (url.rfind(scheme, 0) != 0) throw bad(url.rfind("https://", 0) == 0 ? "https is not supported" : "not an http:// URL");
  std::string rest = url.substr(scheme.size());
  HttpEndpoint e;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    e.base_path = rest.substr(slash);
    rest.resize(slash);
    while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
    if (e.base_path == "/v1") e.base_path.clear();  // people paste the OpenAI base URL
  }
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest[0] == '[') {  // [::1]:8080
    const size_t close = rest.find(']');
    if (close == std::string::npos) throw bad("unclosed '['");
    e.host = rest.substr(1, close - 1);
    colon = close + 1 < rest.size() && rest[close + 1] == ':' ? close + 1 : std::string::npos;
  } else {
    e.host = rest.substr(0, colon);
  }
  if (e.host.empty()) throw bad("no host");
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) throw bad("bad port");
    e.port = std::stoi(port);
    if (e.port < 1 || e.port > 65535) throw bad("port out of range");
  }
  return e;
}

std::string fetch_served_model(const LoadOptions& options) {
  httplib::Client client = make_client(options);
  client.set_read_timeout(std::chrono::seconds(30));
  const std::string where = "http://" + options.endpoint.host + ":" + std::to_string(options.endpoint.port);
  auto res = client.Get(options.endpoint.base_path + "/v1/models");
  if (!res) throw std::runtime_error("cannot reach the server at " + where + ": " + describe(res.error()));
  if (res->status != 200) {
    throw std::runtime_error("GET /v1/models at " + where + " answered HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300));
  }
  const auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string()) {
    throw std::runtime_error("GET /v1/models at " + where + " did not list a model: " + res->body.substr(0, 300));
  }
  return j["data"][0]["id"].get<std::string>();
}

std::vector<LoadResult> run_http_load(const LoadOptions& options, const std::vector<LoadRequest>& requests) {
  std::vector<LoadResult> results(requests.size());
  std::atomic<size_t> next{0};
  const auto start = Clock::now();
  auto now_s = [start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto worker = [&] {
    httplib::Client client = make_client(options);
    for (size_t i = next++; i < requests.size(); i = next++) {
      const double wait = requests[i].arrival_s - now_s();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      stream_one(client, options, requests[i], results[i], now_s);
    }
  };
  const auto n_threads = static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(options.concurrency, static_cast<int64_t>(requests.size()))));
  std::vector<std::jthread> threads;
  threads.reserve(n_threads);
  for (size_t t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  threads.clear();  // joins
  return results;
}

}  // namespace peregrine::cli
