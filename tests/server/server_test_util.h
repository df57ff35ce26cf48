#pragma once
// Helpers the server tests share: the server's usual test flags, SSE framing checks, Prometheus
// samples, JSON bodies of raw responses.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "raw_http.h"

namespace peregrine::test {

using nlohmann::json;

// Wall seconds since `t`.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// `serve` flags for a small, quick server on the demo model, then `extra`.
inline std::vector<std::string> serve_flags(std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"-t", "1", "--max-seqs", "16", "--kv-cache-memory", "64MiB"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// The body as JSON (discarded if it is not JSON), and its "error" object (null if none).
inline json body_json(const RawResponse& r) { return json::parse(r.body, nullptr, false); }
inline json error_of(const RawResponse& r) {
  const json j = body_json(r);
  return j.is_object() && j.contains("error") ? j["error"] : json();
}

// Splits an SSE body that must be exactly a sequence of "data: <payload>\n\n", ending with
// "data: [DONE]\n\n"; returns the JSON payloads before [DONE].
inline std::vector<json> sse_payloads(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  bool done = false;
  while (at < body.size()) {
    EXPECT_FALSE(done) << "bytes after [DONE]";
    EXPECT_EQ(body.compare(at, 6, "data: "), 0) << "event does not start with 'data: ' at byte " << at;
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event at byte " << at;
      break;
    }
    const std::string payload = body.substr(at + 6, end - at - 6);
    EXPECT_EQ(payload.find('\n'), std::string::npos) << "newline inside an event";
    if (payload == "[DONE]")
      done = true;
    else
      out.push_back(json::parse(payload));
    at = end + 2;
  }
  EXPECT_TRUE(done) << "no data: [DONE]";
  EXPECT_TRUE(body.size() >= 14 && body.compare(body.size() - 14, 14, "data: [DONE]\n\n") == 0);
  return out;
}

// After an attack the server still serves: /health answers 200 and a small completion works,
// each on a fresh connection, within a few seconds.
inline void expect_serving(int port) {
  RawConnection health(port);
  health.send(get_request("/health"));
  const std::optional<RawResponse> h = health.read_response(std::chrono::milliseconds(5000));
  ASSERT_TRUE(h) << "/health did not answer";
  EXPECT_EQ(h->status, 200) << h->body;
  RawConnection completion(port);
  completion.send(post_request("/v1/completions", R"({"model":"demo-target","prompt":"It was","max_tokens":2})"));
  const std::optional<RawResponse> c = completion.read_response(std::chrono::milliseconds(10000));
  ASSERT_TRUE(c) << "a completion did not answer";
  EXPECT_EQ(c->status, 200) << c->body;
}

inline double metric(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 2));
}

}  // namespace peregrine::test
