// Issue 27, access from the browser and the host: the real `peregrine serve` over raw sockets.
// Host names are allow-listed (DNS rebinding), cross-origin requests need --cors-origins, JSON
// routes need a JSON Content-Type (no simple cross-site POST); the web page's key becomes an
// HttpOnly session cookie and the page cannot be framed; the key can come from a file or the
// environment instead of the command line. After each, /health and a completion still work.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "raw_http.h"
#include "server_process.h"
#include "server_test_util.h"

namespace peregrine::server {
namespace {

using nlohmann::json;
using test::error_of;
using test::expect_serving;
using test::RawConnection;
using test::RawResponse;
using test::serve_flags;
using test::ServerProcess;
using namespace std::chrono_literals;

// One request on a new connection; its response (status 0 when none came).
RawResponse round_trip(int port, const std::string& request) {
  RawConnection c(port);
  c.send(request);
  std::optional<RawResponse> r = c.read_response(10000ms);
  if (!r) {
    ADD_FAILURE() << "no response to " << request.substr(0, 160);
    return RawResponse{};
  }
  return *r;
}

const std::string kCompletion = R"({"model":"demo-target","prompt":"It was","max_tokens":2})";

// A completion POST with exactly these header lines (each ending \r\n) before Content-Length.
std::string completion_with(const std::string& fields, const std::string& path = "/v1/completions",
                            const std::string& body = kCompletion) {
  return "POST " + path + " HTTP/1.1\r\n" + fields + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         body;
}

std::string health_for(const std::string& host) { return "GET /health HTTP/1.1\r\nHost: " + host + "\r\n\r\n"; }

// Item 10. Host is checked against the server's names (localhost, IP literals, --allowed-hosts);
// a cross-origin request is refused unless --cors-origins lists its origin (then it gets CORS
// headers and its preflight an answer); JSON routes need Content-Type application/json.
TEST(HardeningAccess, HostOriginAndContentTypeAreChecked) {
  ServerProcess s(
      serve_flags({"--allowed-hosts", "models.example,*.corp.example", "--cors-origins", "http://app.example:3000"}));
  const std::string port = std::to_string(s.port());
  for (const std::string& host :
       std::vector<std::string>{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "LocalHost",
                                "ui.localhost:" + port, "models.example", "a.corp.example:" + port, "10.1.2.3"}) {
    EXPECT_EQ(round_trip(s.port(), health_for(host)).status, 200) << host;
  }
  for (const std::string& host :
       std::vector<std::string>{"attacker.example:" + port, "attacker.example", "corp.example", "localhost.evil"}) {
    const RawResponse r = round_trip(s.port(), health_for(host));
    EXPECT_EQ(r.status, 403) << host;
    EXPECT_EQ(error_of(r)["code"], "host_not_allowed") << host;
  }
  // An absolute-form target's authority is the host that counts.
  EXPECT_EQ(round_trip(s.port(), "GET http://attacker.example/health HTTP/1.1\r\nHost: localhost\r\n\r\n").status, 403);
  const std::string json_type = "Host: localhost:" + port + "\r\nContent-Type: application/json\r\n";
  EXPECT_EQ(round_trip(s.port(), completion_with("Host: attacker.example:" + port +
                                                 "\r\nContent-Type: "
                                                 "application/json\r\n"))
                .status,
            403);

  // What a page on another site can send without a preflight: text/plain with its Origin.
  const RawResponse simple = round_trip(
      s.port(),
      completion_with("Host: localhost:" + port + "\r\nContent-Type: text/plain\r\nOrigin: http://evil.example\r\n"));
  EXPECT_EQ(simple.status, 403) << simple.body;
  EXPECT_EQ(error_of(simple)["code"], "origin_not_allowed");
  EXPECT_EQ(round_trip(s.port(), completion_with(json_type + "Origin: http://evil.example\r\n")).status, 403);
  EXPECT_EQ(round_trip(s.port(), completion_with(json_type + "Origin: null\r\n")).status, 403);
  // The server's own origin, and the listed one (with CORS headers).
  EXPECT_EQ(round_trip(s.port(), completion_with(json_type + "Origin: http://localhost:" + port + "\r\n")).status, 200);
  const RawResponse listed = round_trip(s.port(), completion_with(json_type + "Origin: http://app.example:3000\r\n"));
  EXPECT_EQ(listed.status, 200) << listed.body;
  EXPECT_EQ(listed.header("access-control-allow-origin"), "http://app.example:3000");
  const RawResponse preflight =
      round_trip(s.port(), "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost:" + port +
                               "\r\nOrigin: http://app.example:3000\r\nAccess-Control-Request-Method: POST\r\n"
                               "Access-Control-Request-Headers: content-type, authorization\r\n\r\n");
  EXPECT_EQ(preflight.status, 200);
  EXPECT_EQ(preflight.header("access-control-allow-origin"), "http://app.example:3000");
  EXPECT_NE(preflight.header("access-control-allow-headers").find("Content-Type"), std::string::npos);
  EXPECT_NE(preflight.header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_EQ(round_trip(s.port(),
                       "OPTIONS /v1/completions HTTP/1.1\r\nHost: localhost\r\nOrigin: http://evil.example\r\n"
                       "Access-Control-Request-Method: POST\r\n\r\n")
                .status,
            403);

  // JSON routes: no Content-Type, or another type, is 415; JSON with a charset is fine.
  for (const std::string type : std::vector<std::string>{"", "Content-Type: text/plain\r\n",
                                                         "Content-Type: application/x-www-form-urlencoded\r\n",
                                                         "Content-Type: multipart/form-data; boundary=x\r\n"}) {
    for (const std::string path : std::vector<std::string>{"/v1/completions", "/tokenize", "/v1/chat/render"}) {
      const RawResponse r = round_trip(s.port(), completion_with("Host: localhost\r\n" + type, path));
      EXPECT_EQ(r.status, 415) << path << " with " << type;
      EXPECT_EQ(error_of(r)["code"], "unsupported_media_type");
    }
  }
  EXPECT_EQ(
      round_trip(s.port(), completion_with("Host: localhost\r\nContent-Type: Application/JSON; charset=utf-8\r\n"))
          .status,
      200);
  expect_serving(s.port());
  EXPECT_EQ(s.terminate(), 0);
}

// The value of `name` in a Set-Cookie header ("peregrine_session=TOKEN; Path=/; ...").
std::string cookie_pair(const RawResponse& r) {
  const std::string set = r.header("set-cookie");
  return set.substr(0, set.find(';'));
}

// Item 11. With a key, the login form's key becomes an HttpOnly, SameSite=Strict session cookie
// with an expiry; the raw key in a cookie opens nothing; the cookie opens the page's requests
// (its POSTs only with the page's own Origin); the page and login page cannot be framed and run
// no inline script.
TEST(HardeningAccess, WebPageKeyBecomesAnHttpOnlySession) {
  const std::string key = "sk-web 1";
  ServerProcess s(serve_flags({"--api-key", key}));
  const std::string port = std::to_string(s.port());
  const std::string host = "Host: localhost:" + port + "\r\n";

  const RawResponse login_page = round_trip(s.port(), test::get_request("/"));
  EXPECT_EQ(login_page.status, 401);
  EXPECT_NE(login_page.header("content-security-policy").find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_NE(login_page.header("content-security-policy").find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(login_page.header("x-frame-options"), "DENY");
  EXPECT_EQ(login_page.body.find("<script>"), std::string::npos) << "no inline script";
  EXPECT_EQ(login_page.body.find("document.cookie"), std::string::npos);
  EXPECT_EQ(round_trip(s.port(), test::get_request("/webui/login.js")).status, 200);  // the form's own script

  // The raw key in the old cookie opens nothing any more.
  const std::string raw_cookie = "Cookie: peregrine_api_key=sk-web%201\r\n";
  EXPECT_EQ(round_trip(s.port(), test::get_request("/webui/chat.js", raw_cookie)).status, 401);

  EXPECT_EQ(round_trip(s.port(), "POST /webui/login HTTP/1.1\r\n" + host +
                                     "Authorization: Bearer wrong\r\n"
                                     "Content-Length: 0\r\n\r\n")
                .status,
            401);
  const RawResponse login =
      round_trip(s.port(), "POST /webui/login HTTP/1.1\r\n" + host + "Authorization: Bearer " + key +
                               "\r\nOrigin: http://localhost:" + port + "\r\nContent-Length: 0\r\n\r\n");
  ASSERT_EQ(login.status, 200) << login.body;
  const std::string set_cookie = login.header("set-cookie");
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("Max-Age="), std::string::npos) << set_cookie;
  EXPECT_EQ(set_cookie.find("sk-web"), std::string::npos) << "the cookie holds a token, not the key";
  const std::string session = "Cookie: " + cookie_pair(login) + "\r\n";

  const RawResponse page = round_trip(s.port(), test::get_request("/", session));
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.header("x-frame-options"), "DENY");
  EXPECT_NE(page.header("content-security-policy").find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(page.body.find("<script>"), std::string::npos) << "no inline script";
  EXPECT_EQ(round_trip(s.port(), test::get_request("/webui/chat.js", session)).status, 200);
  EXPECT_EQ(round_trip(s.port(), test::get_request("/v1/models", session)).status, 200);

  // The page's own POSTs carry its Origin; a cookie alone (a form or script elsewhere) is not enough.
  const std::string render = R"({"messages":[{"role":"user","content":"hi"}]})";
  const std::string json_type = host + "Content-Type: application/json\r\n" + session;
  EXPECT_EQ(round_trip(s.port(), completion_with(json_type + "Origin: http://localhost:" + port + "\r\n",
                                                 "/v1/chat/render", render))
                .status,
            200);
  EXPECT_EQ(round_trip(s.port(), completion_with(json_type, "/v1/chat/render", render)).status, 401);
  EXPECT_EQ(
      round_trip(s.port(), completion_with(json_type + "Origin: http://localhost:9\r\n", "/v1/chat/render", render))
          .status,
      403);

  // Logging out ends the session.
  const RawResponse logout =
      round_trip(s.port(), "POST /webui/logout HTTP/1.1\r\n" + host + session + "Content-Length: 0\r\n\r\n");
  EXPECT_EQ(logout.status, 200);
  EXPECT_NE(logout.header("set-cookie").find("Max-Age=0"), std::string::npos);
  EXPECT_EQ(round_trip(s.port(), test::get_request("/webui/chat.js", session)).status, 401);

  RawConnection health(s.port());
  health.send(test::get_request("/health"));
  EXPECT_EQ(health.read_response(5000ms)->status, 200);
  EXPECT_EQ(
      round_trip(s.port(), test::post_request("/v1/completions", kCompletion, "Authorization: Bearer " + key + "\r\n"))
          .status,
      200);
  EXPECT_EQ(s.terminate(), 0);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `request` needs the key: 401 without it, 200 with it; and the key is not on the command line.
void expect_key_required(const ServerProcess& s, const std::string& key) {
  EXPECT_EQ(round_trip(s.port(), test::post_request("/v1/completions", kCompletion)).status, 401);
  EXPECT_EQ(
      round_trip(s.port(), test::post_request("/v1/completions", kCompletion, "Authorization: Bearer " + key + "\r\n"))
          .status,
      200);
  const std::string cmdline = read_text("/proc/" + std::to_string(s.pid()) + "/cmdline");
  EXPECT_FALSE(cmdline.empty());
  EXPECT_EQ(cmdline.find(key), std::string::npos) << "the key is readable in /proc/PID/cmdline";
}

std::string peregrine_binary() {
  const char* binary = std::getenv("PEREGRINE_SERVE_BINARY");
  return binary != nullptr ? std::string(binary) : std::string(PEREGRINE_BINARY_DIR) + "/peregrine";
}

// Item 12. The key from --api-key-file (its line ending dropped) or PEREGRINE_API_KEY, so no other
// local user reads it in the process list; --help says the flag is visible.
TEST(HardeningAccess, ApiKeyFromAFileOrTheEnvironment) {
  char path[] = "/tmp/peregrine-key-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string file_key = "file-key-7f3a";
  ASSERT_EQ(write(fd, (file_key + "\n").data(), file_key.size() + 1), static_cast<ssize_t>(file_key.size() + 1));
  close(fd);
  {
    ServerProcess s(serve_flags({"--api-key-file", path}));
    expect_key_required(s, file_key);
    EXPECT_EQ(s.terminate(), 0);
  }
  std::remove(path);
  {
    const std::string env_key = "env-key-91cd";
    setenv("PEREGRINE_API_KEY", env_key.c_str(), 1);
    ServerProcess s(serve_flags());
    unsetenv("PEREGRINE_API_KEY");
    expect_key_required(s, env_key);
    EXPECT_EQ(s.terminate(), 0);
  }
  FILE* help = popen((peregrine_binary() + " serve --help 2>&1").c_str(), "r");
  ASSERT_NE(help, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, help)) > 0;) text.append(buf, n);
  pclose(help);
  EXPECT_NE(text.find("--api-key-file"), std::string::npos) << text;
  EXPECT_NE(text.find("PEREGRINE_API_KEY"), std::string::npos) << text;
  EXPECT_NE(text.find("Other local users can read"), std::string::npos) << text;
}

}  // namespace
}  // namespace peregrine::server
