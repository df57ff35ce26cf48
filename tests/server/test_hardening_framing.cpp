// Issue 27, parsing: the real `peregrine serve` over raw sockets answers what the strictest
// common proxy refuses with 400 at once, then closes: an absolute-form target with an empty
// path followed by a query or fragment (it was served as the query's path), a folded header
// (obs-fold: "Transfer-Encoding:\r\n chunked" was taken as chunked), and chunked-body lines
// ending in a bare LF (no answer for 30 s). /health and a completion still work after.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "raw_http.h"
#include "server_process.h"
#include "server_test_util.h"

namespace peregrine::server {
namespace {

using test::expect_serving;
using test::RawConnection;
using test::RawResponse;
using test::serve_flags;
using test::ServerProcess;
using namespace std::chrono_literals;

TEST(HardeningFraming, AmbiguousTargetsFoldsAndBareLineFeedsAre400AtOnce) {
  ServerProcess s(serve_flags());
  const std::string json_post =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
  const std::string body = R"({"model":"demo-target","prompt":"x","max_tokens":1})";
  const std::string size = [&] {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%zx", body.size());
    return std::string(hex);
  }();
  const std::vector<std::string> requests = {
      "GET http://127.0.0.1?/v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n",
      "GET http://127.0.0.1#/v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n",
      "GET /v1/models#/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
      json_post + "Transfer-Encoding:\r\n chunked\r\n\r\n" + size + "\r\n" + body + "\r\n0\r\n\r\n",
      json_post + "Transfer-Encoding: chunked\r\n\tX-Folded: y\r\n\r\n" + size + "\r\n" + body + "\r\n0\r\n\r\n",
      json_post + "Transfer-Encoding: chunked\r\n\r\n" + size + "\n" + body,                // the size line
      json_post + "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n" + body + "\n",       // after the data
      json_post + "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n" + body + "\r\n0\n",  // the last chunk
      json_post + "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n" + body + "\r\n0\r\nX-Trailer: 1\n",
  };
  for (const std::string& request : requests) {
    RawConnection c(s.port());
    c.send(request);  // and nothing more: the client waits for an answer
    const std::optional<RawResponse> r = c.read_response(3000ms);
    ASSERT_TRUE(r) << "no answer within 3 s to: " << request.substr(0, 140);
    EXPECT_EQ(r->status, 400) << request.substr(0, 140) << "\n" << r->body;
    EXPECT_EQ(r->header("connection"), "close");
    EXPECT_TRUE(c.closed_within(3000ms));
  }
  // The same body with CRLFs, and an absolute-form target with a path, are served.
  RawConnection ok(s.port());
  ok.send(json_post + "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n" + body + "\r\n0\r\n\r\n");
  const std::optional<RawResponse> served = ok.read_response(10000ms);
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200) << served->body;
  RawConnection absolute(s.port());
  absolute.send("GET http://127.0.0.1/v1/models?x HTTP/1.1\r\nHost: localhost\r\n\r\n");
  const std::optional<RawResponse> models = absolute.read_response(5000ms);
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  expect_serving(s.port());
  EXPECT_EQ(s.terminate(), 0);
}

}  // namespace
}  // namespace peregrine::server
