// Issue 14, limits: the real `peregrine serve` over raw sockets, as a hostile client would try
// it. Every limit is enforced before the work it guards (API key and sizes before the body,
// header bytes and lines, chunked bodies, prompt text before tokenizing), a whole-request
// deadline, a connection cap, 600 trickling clients that do not stall a normal one, and peak
// resident memory under a stated figure while oversized and chunked bodies arrive.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "raw_http.h"
#include "server_process.h"
#include "server_test_util.h"

namespace peregrine::server {
namespace {

using nlohmann::json;
using test::body_json;
using test::error_of;
using test::RawConnection;
using test::RawResponse;
using test::serve_flags;
using test::ServerProcess;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sends `head`, then a chunked body of `total` bytes (the JSON start of a completion request,
// then 1 MiB chunks of 'a') without ever blocking, reading for the server's answer in between.
// Returns the answer (nullopt if none came) and how many body bytes the server took before it
// answered or stopped taking them.
std::pair<std::optional<RawResponse>, size_t> send_chunked(int port, const std::string& head, size_t total) {
  RawConnection c(port);
  std::optional<RawResponse> answer;
  size_t sent = 0;
  if (!c.send(head + "21\r\n{\"model\":\"demo-target\",\"prompt\":\"\r\n")) return {answer, sent};
  const std::string chunk = "100000\r\n" + std::string(1 << 20, 'a') + "\r\n";  // 1 MiB of JSON-string bytes
  std::string pending;
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline) {
    if (pending.empty() && sent < total) {
      pending = chunk;
      sent += 1 << 20;
    }
    if (!pending.empty()) {
      const ssize_t n = c.send_some(pending);
      if (n < 0) break;  // the server closed or reset
      pending.erase(0, static_cast<size_t>(n));
    }
    if ((answer = c.read_response(pending.empty() && sent >= total ? 2000ms : 5ms))) break;
    if (pending.empty() && sent >= total) c.send("0\r\n\r\n");
  }
  return {answer, sent - pending.size()};
}

constexpr const char* kKey = "sekrit";
const std::string kAuth = std::string("Authorization: Bearer ") + kKey + "\r\n";

std::string chunked_head(const std::string& extra) {
  return "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + extra +
         "Transfer-Encoding: chunked\r\n\r\n";
}

// 1. The API key and declared sizes are checked before any body byte is read; chunked bodies
// and header lines have limits.
TEST(HardeningLimits, KeyAndSizesAreCheckedBeforeTheBody) {
  ServerProcess s(serve_flags({"--api-key", kKey}));
  {  // Unauthenticated, chunked, no body sent yet: 401 at once.
    RawConnection c(s.port());
    ASSERT_TRUE(c.send(chunked_head("")));
    // The old server waited for the body (or its 30 s read timeout) before answering.
    const auto r = c.read_response(5000ms);
    ASSERT_TRUE(r) << "no answer before the body was sent";
    EXPECT_EQ(r->status, 401);
    EXPECT_TRUE(c.closed_within(3000ms)) << "the unread body must not keep the connection";
  }
  {  // Unauthenticated, 400 MB declared: 401 without reading it.
    RawConnection c(s.port());
    ASSERT_TRUE(
        c.send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 400000000\r\n\r\n{\"model\""));
    const auto r = c.read_response(1000ms);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
  }
  {  // Authenticated, 9 MiB declared: 413 before the body.
    RawConnection c(s.port());
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
                       kAuth + "Content-Length: " + std::to_string(9 << 20) + "\r\n\r\n"));
    const auto r = c.read_response(1000ms);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(error_of(*r)["code"], "payload_too_large");
  }
  // Authenticated, chunked, 64 MiB: 413 once the decoded body passes 8 MiB; the server stops
  // taking the body long before the end.
  const auto [answer, taken] = send_chunked(s.port(), chunked_head(kAuth), 64 << 20);
  ASSERT_TRUE(answer) << "no answer after " << taken << " bytes";
  EXPECT_EQ(answer->status, 413);
  EXPECT_LT(taken, size_t{32} << 20) << "the server read far past the 8 MiB limit";
  // 101 header lines, or 20 KiB of header: 431.
  std::string many;
  for (int i = 0; i < 101; ++i) many += "X-Field-" + std::to_string(i) + ": v\r\n";
  RawConnection lines(s.port());
  ASSERT_TRUE(lines.send("GET /health HTTP/1.1\r\nHost: localhost\r\n" + many + "\r\n"));
  auto r = lines.read_response(1000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  RawConnection big(s.port());
  big.send("GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: " + std::string(20 << 10, 'b') + "\r\n\r\n");
  r = big.read_response(1000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_EQ(s.terminate(), 0);
}

// 2. A prompt longer than the context can hold is refused before it is tokenized.
TEST(HardeningLimits, OversizedPromptsAreRefusedBeforeTokenizing) {
  ServerProcess s(serve_flags());
  const std::string huge(8'000'000, 'a');
  const std::vector<std::string> requests = {
      test::post_request("/v1/completions", json{{"model", "demo-target"}, {"prompt", huge}}.dump()),
      test::post_request("/v1/completions", json{{"model", "demo-target"}, {"prompt", {"x", huge}}}.dump()),
      test::post_request("/v1/chat/completions",
                         json{{"model", "demo-target"}, {"messages", {{{"role", "user"}, {"content", huge}}}}}.dump()),
      test::post_request("/tokenize", json{{"prompt", huge}}.dump()),
  };
  const std::vector<std::string> params = {"prompt", "prompt", "messages", "prompt"};
  std::vector<std::optional<RawResponse>> answers(requests.size());
  std::vector<double> took(requests.size());
  const double cpu_before = s.cpu_seconds();
  std::vector<std::thread> threads;  // all four at once
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      RawConnection c(s.port());
      c.send(requests[i]);
      const auto t0 = Clock::now();
      answers[i] = c.read_response(30s);
      took[i] = seconds_since(t0);
    });
  }
  for (auto& t : threads) t.join();
  const double cpu = s.cpu_seconds() - cpu_before;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(answers[i]) << i;
    EXPECT_EQ(answers[i]->status, 400) << answers[i]->body.substr(0, 300);
    EXPECT_EQ(error_of(*answers[i])["code"], "context_length_exceeded") << i;
    EXPECT_EQ(error_of(*answers[i])["param"], params[i]) << i;
  }
  // The server's CPU time, not wall time (the test machines are shared): tokenizing one 8 MB
  // prompt took ~5 s of CPU (~20 s for the four); reading and parsing the four JSON bodies takes
  // 1.1-1.5 s on a quiet 2-core VM and up to 2 s beside a parallel test run (measured
  // 2026-12-02), so 3 s still tells refusing from tokenizing without failing on a busy machine.
  EXPECT_LT(cpu, 3.0) << "the server spent " << cpu << " s of CPU on four refusals";
  std::printf("8 MB prompts refused in %.3f %.3f %.3f %.3f s (server CPU %.3f s); peak RSS %ld KiB\n", took[0], took[1],
              took[2], took[3], cpu, s.memory_kib("VmHWM"));
  EXPECT_EQ(s.terminate(), 0);
}

// 3. A request's head and body must arrive within --request-timeout, however it trickles.
TEST(HardeningLimits, WholeRequestDeadline) {
  ServerProcess s(serve_flags({"--request-timeout", "1.5"}));
  const std::string body = json{{"model", "demo-target"}, {"prompt", "x"}, {"max_tokens", 1}}.dump();
  for (const bool slow_head : {true, false}) {
    RawConnection c(s.port());
    const std::string request = test::post_request("/v1/completions", body);
    const size_t head_end = request.find("\r\n\r\n") + 4;
    size_t at = 0;
    if (!slow_head) {
      c.send(request.substr(0, head_end));
      at = head_end;
    }
    const auto t0 = Clock::now();
    std::optional<RawResponse> r;
    while (!r && at < request.size() && seconds_since(t0) < 8) {
      c.send(request.substr(at++, 1));  // one byte every 100 ms: each read makes progress
      r = c.read_response(100ms);
    }
    ASSERT_TRUE(r) << (slow_head ? "head" : "body") << " trickled for " << seconds_since(t0) << " s without a 408";
    EXPECT_EQ(r->status, 408);
    EXPECT_EQ(error_of(*r)["code"], "request_timeout");
    EXPECT_GT(seconds_since(t0), 1.2);
    EXPECT_LT(seconds_since(t0), 5.0);  // 1.5 s, with room for a loaded machine
    EXPECT_TRUE(c.closed_within(3000ms));
  }
  EXPECT_EQ(s.terminate(), 0);
}

// 3. 600 clients trickle request heads a byte at a time; a normal client is still answered
// within a second, every time.
TEST(HardeningLimits, TricklingClientsDoNotStallOthers) {
  ServerProcess s(serve_flags());
  constexpr int kTricklers = 600;
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + std::string(4000, 's');
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < kTricklers; ++i) slow.push_back(std::make_unique<RawConnection>(s.port()));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    // One byte per connection every ~500 ms: every read the server does makes progress.
    for (size_t at = 0; !stop.load() && at < head.size(); ++at) {
      for (auto& c : slow) c->send_some(head.substr(at, 1));
      std::this_thread::sleep_for(500ms);
    }
  });
  std::this_thread::sleep_for(1000ms);  // every trickler has started its request
  const std::string completion = json{{"model", "demo-target"}, {"prompt", "It was"}, {"max_tokens", 4}}.dump();
  double worst = 0;
  int answered = 0;
  const auto end = Clock::now() + 5s;
  while (Clock::now() < end) {
    for (const std::string& request :
         {test::get_request("/health"), test::post_request("/v1/completions", completion)}) {
      const auto t0 = Clock::now();
      RawConnection c(s.port());
      c.send(request);
      const auto r = c.read_response(5000ms);
      const double took = seconds_since(t0);
      worst = std::max(worst, took);
      ASSERT_TRUE(r) << "no answer within 5 s while " << kTricklers << " clients trickle";
      EXPECT_EQ(r->status, 200);
      EXPECT_LT(took, 1.0);
      ++answered;
    }
    std::this_thread::sleep_for(100ms);
  }
  stop.store(true);
  trickle.join();
  std::printf("%d answers to a normal client beside %d trickling connections; slowest %.3f s\n", answered, kTricklers,
              worst);
  int still_open = 0;
  for (auto& c : slow) still_open += c->send_some("x") >= 0 ? 1 : 0;
  EXPECT_EQ(still_open, kTricklers) << "trickling connections within their deadline are kept";
  EXPECT_EQ(s.terminate(), 0);
}

// Over --max-connections, a new connection gets 503 with Retry-After and is closed.
TEST(HardeningLimits, ConnectionCap) {
  ServerProcess s(serve_flags({"--max-connections", "8"}));
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(std::make_unique<RawConnection>(s.port()));
    held.back()->send("GET /health HTTP/1.1\r\n");  // a request in progress
  }
  std::this_thread::sleep_for(200ms);
  RawConnection extra(s.port());
  extra.send(test::get_request("/health"));
  const auto r = extra.read_response(2000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->header("retry-after"), "1");
  EXPECT_EQ(error_of(*r)["code"], "too_many_connections");
  EXPECT_TRUE(extra.closed_within(3000ms));
  held.clear();
  // Room again once they are gone.
  bool ok = false;
  for (int i = 0; i < 50 && !ok; ++i) {
    RawConnection c(s.port());
    c.send(test::get_request("/health"));
    const auto again = c.read_response(2000ms);
    ok = again && again->status == 200;
    if (!ok) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(ok);
  EXPECT_EQ(s.terminate(), 0);
}

// Peak resident memory stays under 256 MiB (the server idles at ~25 MiB) while, all at once,
// four unauthenticated clients push 100 MB chunked bodies, four authenticated ones push 64 MiB
// chunked bodies, and four send 8 MB prompts.
TEST(HardeningLimits, MemoryStaysBoundedUnderOversizedBodies) {
  ServerProcess s(serve_flags({"--api-key", kKey}));
  const long idle_kib = s.memory_kib("VmHWM");
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&] {
      if (send_chunked(s.port(), chunked_head(""), 100 << 20).first) ++answered;
    });
    clients.emplace_back([&] {
      if (send_chunked(s.port(), chunked_head(kAuth), 64 << 20).first) {
        ++answered;
      }
    });
    clients.emplace_back([&] {
      RawConnection c(s.port());
      c.send(test::post_request("/v1/completions",
                                json{{"model", "demo-target"}, {"prompt", std::string(8'000'000, 'a')}}.dump(), kAuth));
      if (c.read_response(20s)) ++answered;
    });
  }
  for (auto& t : clients) t.join();
  const long peak_kib = s.memory_kib("VmHWM");
  std::printf("peak RSS %ld KiB (idle %ld KiB) with 12 oversized requests at once\n", peak_kib, idle_kib);
  EXPECT_EQ(answered.load(), 12);
  EXPECT_LT(peak_kib, 256 * 1024);
  EXPECT_EQ(s.terminate(), 0);
}

}  // namespace
}  // namespace peregrine::server
