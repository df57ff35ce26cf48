// Issue 27, the requests that took the server down or froze it (items 1, 2, 3, 4 and 7): the real
// `peregrine serve` on the demo model over raw sockets, each attack as the second hostile-client
// probe sent it. After every attack /health and a small completion must still be answered.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "raw_http.h"
#include "server_process.h"
#include "server_test_util.h"

namespace peregrine::server {
namespace {

using nlohmann::json;
using test::error_of;
using test::RawConnection;
using test::RawResponse;
using test::serve_flags;
using test::ServerProcess;
using namespace std::chrono_literals;
using test::seconds_since;
using Clock = std::chrono::steady_clock;

std::optional<RawResponse> send(const ServerProcess& s, const std::string& request,
                                std::chrono::milliseconds timeout = 30000ms) {
  RawConnection c(s.port());
  if (!c.send(request)) return std::nullopt;
  return c.read_response(timeout);
}

std::optional<RawResponse> post(const ServerProcess& s, const std::string& path, const std::string& body,
                                std::chrono::milliseconds timeout = 30000ms) {
  return send(s, test::post_request(path, body), timeout);
}

// The server is alive and serving: /health, then a 4-token completion.
void expect_still_serving(const ServerProcess& s, const std::string& after) {
  const auto health = send(s, test::get_request("/health"), 10000ms);
  ASSERT_TRUE(health) << "no /health answer after " << after;
  EXPECT_EQ(health->status, 200) << after;
  const auto done = post(s, "/v1/completions",
                         json{{"model", "demo-target"}, {"prompt", "It was"}, {"max_tokens", 4}}.dump(), 10000ms);
  ASSERT_TRUE(done) << "no completion after " << after;
  EXPECT_EQ(done->status, 200) << after << ": " << done->body.substr(0, 300);
}

std::string nested(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// Item 1: JSON nested 100 000 deep (200 KB) anywhere in a body took the server down with SIGSEGV
// (a recursive dump or copy of the client's value). Every body is now measured before it is
// parsed: 400, at once, wherever the nesting is.
TEST(HostileRequests, DeeplyNestedJsonIsRefused) {
  ServerProcess s(serve_flags());
  const std::string deep = nested(100000);
  const std::string schema_body = R"({"model":"demo-target","prompt":"x","response_format":{"type":"json_schema",)"
                                  R"("json_schema":{"name":"n","schema":{"type":"object","x":)" +
                                  deep + "}}}}";
  const std::string tool_head = R"({"model":"demo-target","messages":[{"role":"user","content":"hi"}],"tools":[)";
  const std::string params_body =
      tool_head + R"({"type":"function","function":{"name":"f","parameters":{"type":"object","x":)" + deep + "}}}]}";
  const std::string tool_body = tool_head + R"({"type":"function","x":)" + deep + "}]}";
  const std::string messages_body = R"({"messages":[{"role":"user","content":"hi","x":)" + deep + "}]}";
  const std::string unknown_body = R"({"model":"demo-target","prompt":"x","unknown":)" + deep + "}";
  const std::vector<std::pair<std::string, std::string>> attacks = {{"/v1/completions", schema_body},
                                                                    {"/v1/chat/completions", params_body},
                                                                    {"/v1/chat/completions", tool_body},
                                                                    {"/tokenize", messages_body},
                                                                    {"/v1/chat/render", params_body},
                                                                    {"/v1/completions", unknown_body},
                                                                    {"/detokenize", R"({"tokens":)" + deep + "}"}};
  for (const auto& [path, body] : attacks) {
    const auto t0 = Clock::now();
    const auto r = post(s, path, body);
    ASSERT_TRUE(r) << path << ": no answer (the server died?)";
    EXPECT_EQ(r->status, 400) << path << ": " << r->body.substr(0, 300);
    EXPECT_NE(error_of(*r)["message"].get<std::string>().find("more than 128 levels deep"), std::string::npos)
        << r->body.substr(0, 300);
    EXPECT_LT(seconds_since(t0), 5.0) << path;
    expect_still_serving(s, path);
  }
  // 128 levels are still taken (a schema's own limit refuses it, with 400, not a crash).
  const std::string at_limit = R"({"model":"demo-target","prompt":"x","max_tokens":2,"unknown":)" + nested(127) + "}";
  const auto r = post(s, "/v1/completions", at_limit);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body.substr(0, 300);
  EXPECT_EQ(s.terminate(), 0);
}

// A grammar whose start state holds 520 stacks (under the 1 024 limit) but 1 040 after its first
// byte: the engine's grammar step threw outside any handler and the process aborted.
std::string ambiguous_after_first_byte() {
  std::string g = "root ::= \"{\" s \"k0\"";
  for (int i = 1; i < 520; ++i) g += " | \"{\" s \"k" + std::to_string(i) + "\"";
  return g + "\ns ::= \" \" | \"\"\n";
}

// Item 2 (and 7): a request whose grammar becomes too ambiguous mid-generation ends alone, with
// an error naming it as the client's (400; a stream's final event), while another stream goes on.
TEST(HostileRequests, AGrammarFailingMidGenerationEndsOnlyItsRequest) {
  ServerProcess s(serve_flags());
  json body = {
      {"model", "demo-target"}, {"prompt", "It was"}, {"max_tokens", 8}, {"grammar", ambiguous_after_first_byte()}};
  json schema_body = {{"model", "demo-target"}, {"prompt", "It was"}, {"max_tokens", 8}};
  json any_of = json::array();
  for (int i = 0; i < 500; ++i) {
    any_of.push_back({{"type", "object"}, {"properties", {{"a" + std::to_string(i), {{"type", "string"}}}}}});
  }
  schema_body["response_format"] = {{"type", "json_schema"},
                                    {"json_schema", {{"name", "n"}, {"schema", {{"anyOf", any_of}}}}}};
  // A normal stream runs beside the failing requests and must finish normally.
  std::optional<RawResponse> beside;
  std::jthread normal([&] {
    beside = post(s, "/v1/completions",
                  json{{"model", "demo-target"},
                       {"prompt", "Once upon"},
                       {"max_tokens", 48},
                       {"ignore_eos", true},
                       {"stream", true}}
                      .dump());
  });
  for (const json& b : {body, schema_body}) {
    const auto whole = post(s, "/v1/completions", b.dump());
    ASSERT_TRUE(whole) << "no answer (the server died?)";
    EXPECT_EQ(whole->status, 400) << whole->body.substr(0, 300);
    EXPECT_EQ(error_of(*whole)["type"], "invalid_request_error");
    EXPECT_NE(error_of(*whole)["message"].get<std::string>().find("too ambiguous"), std::string::npos);
    json streamed = b;
    streamed["stream"] = true;
    const auto sse = post(s, "/v1/completions", streamed.dump());
    ASSERT_TRUE(sse) << "no streamed answer (the server died?)";
    EXPECT_EQ(sse->status, 200);
    const std::vector<json> events = test::sse_payloads(sse->body);
    ASSERT_FALSE(events.empty());
    ASSERT_TRUE(events.back().contains("error")) << events.back().dump();
    EXPECT_EQ(events.back()["error"]["type"], "invalid_request_error");
  }
  normal.join();
  ASSERT_TRUE(beside);
  EXPECT_EQ(beside->status, 200);
  const std::vector<json> events = test::sse_payloads(beside->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length") << events.back().dump();
  expect_still_serving(s, "a grammar that grows too ambiguous");
  EXPECT_EQ(s.terminate(), 0);
}

// Item 3: 4 096 alternatives that each expand through 32 000 empty rules (16 KB of grammar): each
// alternative had its own expansion budget, so building the start state took ~268 M steps (13 s,
// on an HTTP thread and again on the engine thread for every choice). One budget for the whole
// start state refuses it at once, and an n=16 request costs no more than one.
TEST(HostileRequests, StartStateBombIsRefusedAtOnce) {
  ServerProcess s(serve_flags());
  std::string g = "root ::= a";
  for (int i = 1; i < 4096; ++i) g += " | a";
  g += "\na ::= b{32000} \"x\"\nb ::= \"\"\n";
  const double cpu_before = s.cpu_seconds();
  for (int n : {1, 16}) {
    const auto r =
        post(s, "/v1/completions",
             json{{"model", "demo-target"}, {"prompt", "x"}, {"max_tokens", 4}, {"n", n}, {"grammar", g}}.dump());
    ASSERT_TRUE(r) << "no answer within 30 s";
    EXPECT_EQ(r->status, 400) << r->body.substr(0, 300);
    EXPECT_EQ(error_of(*r)["param"], "grammar");
    EXPECT_NE(error_of(*r)["message"].get<std::string>().find("too costly"), std::string::npos) << r->body;
  }
  // Server CPU time, not wall time (the test machines are shared): 13 s and more before.
  const double cpu = s.cpu_seconds() - cpu_before;
  EXPECT_LT(cpu, 2.0) << "the server spent " << cpu << " s of CPU refusing two grammars";
  std::printf("start-state bomb refused twice with %.3f s of server CPU\n", cpu);
  expect_still_serving(s, "the start-state bomb");
  EXPECT_EQ(s.terminate(), 0);
}

// Item 4: 250 000 empty messages (7 MB) passed the length pre-check, which counted only content
// bytes, and rendered 7 MB of template on an I/O thread (2.5-3.1 s of CPU and ~900 MB each; four
// at once held /health for 6 s; 847 MB stayed resident). The template's least text per message
// now counts before rendering, preparation runs off the I/O threads, and memory goes back after.
TEST(HostileRequests, ManyEmptyMessagesAreRefusedBeforeRendering) {
  ServerProcess s(serve_flags());
  std::string messages = "[";
  for (int i = 0; i < 250000; ++i) messages += std::string(i > 0 ? "," : "") + R"({"role":"user","content":""})";
  messages += "]";
  const std::string chat = R"({"model":"demo-target","messages":)" + messages + "}";
  const std::string tokenize = R"({"messages":)" + messages + "}";
  ASSERT_LT(chat.size(), size_t{8} << 20);
  const long rss_before = s.memory_kib("VmRSS");
  const double cpu_before = s.cpu_seconds();
  std::vector<std::optional<RawResponse>> answers(4);
  std::vector<std::jthread> threads;
  for (size_t i = 0; i < answers.size(); ++i) {
    threads.emplace_back([&, i] {
      answers[i] = post(s, i % 2 == 0 ? "/v1/chat/completions" : "/tokenize", i % 2 == 0 ? chat : tokenize);
    });
  }
  // /health is answered by an I/O thread while the four are prepared elsewhere.
  std::this_thread::sleep_for(300ms);
  const auto t0 = Clock::now();
  const auto health = send(s, test::get_request("/health"), 10000ms);
  const double health_s = seconds_since(t0);
  for (auto& t : threads) t.join();
  const double cpu = s.cpu_seconds() - cpu_before;
  for (const auto& r : answers) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body.substr(0, 300);
    EXPECT_EQ(error_of(*r)["code"], "context_length_exceeded");
    EXPECT_EQ(error_of(*r)["param"], "messages");
  }
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_LT(health_s, 2.0) << "/health waited behind the heavy requests";
  // Parsing four 7 MB bodies of 250 000 objects is most of it; rendering them cost 10-12 s.
  EXPECT_LT(cpu, 6.0) << "the server spent " << cpu << " s of CPU on four refusals";
  const long rss_after = s.memory_kib("VmRSS");
  EXPECT_LT(rss_after - rss_before, 200 * 1024) << "RSS " << rss_before << " -> " << rss_after << " KiB";
  std::printf(
      "4 x 250 000 empty messages refused with %.3f s of server CPU; /health in %.3f s; RSS %ld -> %ld KiB "
      "(peak %ld)\n",
      cpu, health_s, rss_before, rss_after, s.memory_kib("VmHWM"));
  expect_still_serving(s, "250 000 empty messages");
  EXPECT_EQ(s.terminate(), 0);
}

// Item 4: requests beyond the preparing threads' queue get 503 with Retry-After at once instead
// of queueing without bound; the ones taken are all answered.
TEST(HostileRequests, PreparationQueueIsBounded) {
  ServerProcess s(serve_flags({"--prepare-threads", "1", "--prepare-queue", "1"}));
  // Bodies that take a while to parse (a 7 MB list of numbers) but are otherwise fine.
  std::string body = R"({"model":"demo-target","prompt":"x","max_tokens":1,"unused":[0)";
  for (int i = 1; i < 1200000; ++i) body += ",5";
  body += "]}";
  constexpr int kClients = 8;
  std::vector<std::optional<RawResponse>> answers(kClients);
  std::vector<std::jthread> threads;
  for (int i = 0; i < kClients; ++i) threads.emplace_back([&, i] { answers[i] = post(s, "/v1/completions", body); });
  for (auto& t : threads) t.join();
  int ok = 0;
  int busy = 0;
  for (const auto& r : answers) {
    ASSERT_TRUE(r);
    if (r->status == 200) ++ok;
    if (r->status == 503) {
      ++busy;
      EXPECT_EQ(r->header("retry-after"), "1");
      EXPECT_EQ(error_of(*r)["code"], "too_many_requests");
    }
  }
  EXPECT_EQ(ok + busy, kClients);
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1) << "eight 7 MB bodies at once, one thread and a queue of one: some must be refused";
  expect_still_serving(s, "a full preparation queue");
  EXPECT_EQ(s.terminate(), 0);
}

// Item 7: a client's bad pattern is the client's error (400, not 500 "generation failed"), and
// the refusal names the pattern, not a rule of the grammar it became ('root-2-3').
TEST(HostileRequests, BadPatternsAreTheClientsError) {
  ServerProcess s(serve_flags());
  for (const std::string pattern : {"^((a{0,1000}){0,1000}){0,1000}$", "^(a|a?)+$"}) {
    const json schema = {{"type", "string"}, {"pattern", pattern}};
    const auto r =
        post(s, "/v1/completions",
             json{{"model", "demo-target"},
                  {"prompt", "x"},
                  {"max_tokens", 8},
                  {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}}
                 .dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body.substr(0, 300);
    EXPECT_EQ(error_of(*r)["type"], "invalid_request_error");
    EXPECT_EQ(error_of(*r)["param"], "response_format");
    const std::string message = error_of(*r)["message"];
    EXPECT_NE(message.find("pattern '" + pattern + "'"), std::string::npos) << message;
    EXPECT_EQ(message.find("root-"), std::string::npos) << message;
  }
  expect_still_serving(s, "bad patterns");
  EXPECT_EQ(s.terminate(), 0);
}

}  // namespace
}  // namespace peregrine::server
