// The real `peregrine serve` over HTTP (demo model, loopback, --port 0): every route, every
// error case, auth, SSE framing byte by byte, metrics, tokenize round trip, a client that
// disconnects mid-stream, the queue limit and graceful shutdown.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "exposition_check.h"
#include "raw_http.h"
#include "server/http_server.h"
#include "server_process.h"
#include "server_test_util.h"

namespace peregrine::server {
namespace {

using nlohmann::json;
using test::metric;
using test::ServerProcess;
using test::sse_payloads;

const std::vector<std::string> kFlags = test::serve_flags();

json body_of(const httplib::Result& r) {
  if (!r) {
    ADD_FAILURE() << "no response: " << httplib::to_string(r.error());
    return json();
  }
  return json::parse(r->body);
}

httplib::Result post(httplib::Client& c, const std::string& path, const json& body) {
  return c.Post(path.c_str(), body.dump(), "application/json");
}

// The status and error object of a failing request; checks OpenAI's error shape.
void expect_error(const httplib::Result& r, int status, const std::string& param = "", const std::string& code = "") {
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  const json j = json::parse(r->body);
  ASSERT_TRUE(j.contains("error")) << r->body;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k << " in " << r->body;
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << r->body;
  }
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r->body;
  }
}

class Http : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<ServerProcess>(kFlags); }
  static void TearDownTestSuite() { server_.reset(); }
  std::unique_ptr<httplib::Client> client() { return server_->client(); }
  static std::unique_ptr<ServerProcess> server_;
};
std::unique_ptr<ServerProcess> Http::server_;

TEST_F(Http, ReadyLineHealthAndModels) {
  EXPECT_TRUE(std::regex_match(server_->ready_line(), std::regex("peregrine: serving demo-target on http://127\\.0\\.0\\.1:[0-9]+\n")))
      << server_->ready_line();
  auto c = client();
  auto h = c->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const json models = body_of(c->Get("/v1/models"));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "demo-target");
  EXPECT_EQ(body_of(c->Get("/v1/models/demo-target"))["id"], "demo-target");
  expect_error(c->Get("/v1/models/nope"), 404, "model", "model_not_found");
}

TEST_F(Http, CompletionNonStreaming) {
  auto c = client();
  const json req = {{"model", "demo-target"}, {"prompt", "It was a truth"}, {"max_tokens", 12}, {"seed", 7}, {"temperature", 0.8}};
  const json a = body_of(post(*c, "/v1/completions", req));
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["model"], "demo-target");
  EXPECT_EQ(a["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(a["choices"].size(), 1u);
  EXPECT_EQ(a["choices"][0]["index"], 0);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(a["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(a["usage"]["completion_tokens"], 12);
  EXPECT_EQ(a["usage"]["total_tokens"], a["usage"]["prompt_tokens"].get<int>() + 12);
  // Same seed, same text.
  const json b = body_of(post(*c, "/v1/completions", req));
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  // echo prepends the prompt.
  json echo = req;
  echo["echo"] = true;
  const json e = body_of(post(*c, "/v1/completions", echo));
  EXPECT_EQ(e["choices"][0]["text"], "It was a truth" + a["choices"][0]["text"].get<std::string>());
}

TEST_F(Http, CompletionChoicesPromptsAndLogprobs) {
  auto c = client();
  // Two prompts x n=2: indexes prompt-major; choice i of each prompt seeded seed + i.
  const json r = body_of(post(*c, "/v1/completions",
                              {{"model", "demo-target"}, {"prompt", {"She", "He"}}, {"n", 2}, {"max_tokens", 6}, {"seed", 3}}));
  ASSERT_EQ(r["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r["choices"][i]["index"], i);
  const json solo = body_of(post(*c, "/v1/completions", {{"model", "demo-target"}, {"prompt", "He"}, {"max_tokens", 6}, {"seed", 4}}));
  EXPECT_EQ(r["choices"][3]["text"], solo["choices"][0]["text"]);
  // Token-id prompts get no BOS added; the same text with BOS as ids gives the same answer.
  const json tok = body_of(post(*c, "/tokenize", {{"prompt", "He"}}));
  const json ids = body_of(post(*c, "/v1/completions", {{"model", "demo-target"}, {"prompt", tok["tokens"]}, {"max_tokens", 6}, {"seed", 4}}));
  EXPECT_EQ(ids["choices"][0]["text"], solo["choices"][0]["text"]);
  EXPECT_EQ(ids["usage"]["prompt_tokens"], tok["count"]);
  // logprobs: k alternatives per token, offsets into the text.
  const json lp = body_of(post(*c, "/v1/completions",
                               {{"model", "demo-target"}, {"prompt", "He"}, {"max_tokens", 5}, {"logprobs", 3}, {"temperature", 0}}));
  const json& l = lp["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 5u);
  ASSERT_EQ(l["token_logprobs"].size(), 5u);
  ASSERT_EQ(l["text_offset"].size(), 5u);
  EXPECT_EQ(l["text_offset"][0], 0);
  std::string joined;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_LE(l["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(l["top_logprobs"][i].size(), 3u);
    EXPECT_EQ(l["text_offset"][i].get<size_t>(), joined.size());
    joined += l["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, lp["choices"][0]["text"]);
}

TEST_F(Http, ChatNonStreamingAndLogprobs) {
  auto c = client();
  const json r = body_of(post(*c, "/v1/chat/completions",
                              {{"model", "demo-target"},
                               {"messages", {{{"role", "system"}, {"content", "Be Austen."}}, {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hello"}}}}}}},
                               {"max_tokens", 8}, {"logprobs", true}, {"top_logprobs", 2}, {"seed", 1}}));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string());
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_GE(content.size(), 1u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_LE(r["usage"]["completion_tokens"].get<int>(), 8);
}

TEST_F(Http, StreamingCompletionFramingMatchesNonStreaming) {
  auto c = client();
  json req = {{"model", "demo-target"}, {"prompt", "Mr. Darcy"}, {"max_tokens", 20}, {"seed", 11}, {"n", 2}};
  const json whole = body_of(post(*c, "/v1/completions", req));
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  auto r = post(*c, "/v1/completions", req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  const std::vector<json> events = sse_payloads(r->body);
  ASSERT_GE(events.size(), 3u);
  std::string text[2];
  int finishes = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_TRUE(e.contains("usage") && e["usage"].is_null());
    ASSERT_EQ(e["choices"].size(), 1u);
    const int index = e["choices"][0]["index"];
    text[index] += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) ++finishes;
  }
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(text[0], whole["choices"][0]["text"]);
  EXPECT_EQ(text[1], whole["choices"][1]["text"]);
  const json& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], whole["usage"]);
}

TEST_F(Http, StreamingChatOrder) {
  auto c = client();
  const json req = {{"model", "demo-target"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6},
                    {"stream", true}, {"stop", {"zzzz"}}, {"seed", 2}};
  auto r = post(*c, "/v1/chat/completions", req);
  ASSERT_TRUE(r);
  const std::vector<json> events = sse_payloads(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front()["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(events.back()["choices"][0]["delta"], json::object());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "chat.completion.chunk");
    EXPECT_TRUE(events[i]["choices"][0]["delta"].contains("content"));
    EXPECT_FALSE(events[i]["choices"][0]["delta"].contains("role"));
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null());
    EXPECT_FALSE(events[i].contains("usage"));  // only with include_usage
  }
}

TEST_F(Http, StopStrings) {
  auto c = client();
  const json base = {{"model", "demo-target"}, {"prompt", "It was"}, {"max_tokens", 30}, {"seed", 5}};
  const std::string full = body_of(post(*c, "/v1/completions", base))["choices"][0]["text"];
  ASSERT_GT(full.size(), 6u);
  const std::string stop = full.substr(4, 2);
  json req = base;
  req["stop"] = stop;
  const json r = body_of(post(*c, "/v1/completions", req));
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST_F(Http, ErrorCases) {
  auto c = client();
  const json ok = {{"model", "demo-target"}, {"prompt", "x"}, {"max_tokens", 2}};
  auto with = [&](const json& patch) {
    json b = ok;
    b.update(patch);
    return b;
  };
  expect_error(c->Post("/v1/completions", "{\"model\": ", "application/json"), 400);
  expect_error(c->Post("/v1/completions", "{\"model\":\"demo-target\",\"prompt\":\"\xff\xfe\"}", "application/json"), 400);
  expect_error(c->Post("/v1/completions", "[1,2]", "application/json"), 400);
  expect_error(post(*c, "/v1/completions", with({{"max_tokens", "2"}})), 400, "max_tokens");
  expect_error(post(*c, "/v1/completions", with({{"max_tokens", -5}})), 400, "max_tokens");
  expect_error(post(*c, "/v1/completions", with({{"temperature", 1e308}})), 400, "temperature");
  expect_error(post(*c, "/v1/completions", with({{"n", 1000}})), 400, "n");
  expect_error(post(*c, "/v1/completions", with({{"prompt", {1, 2, 999999}}})), 400, "prompt");
  expect_error(post(*c, "/v1/completions", json{{"model", "demo-target"}}), 400, "prompt");
  expect_error(post(*c, "/v1/chat/completions", json{{"model", "demo-target"}}), 400, "messages");
  expect_error(post(*c, "/v1/completions", with({{"model", "gpt-4"}})), 404, "model", "model_not_found");
  expect_error(post(*c, "/v1/completions", with({{"max_tokens", 100000}})), 400, "max_tokens", "context_length_exceeded");
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += " word";
  expect_error(post(*c, "/v1/completions", with({{"prompt", long_prompt}, {"max_tokens", nullptr}})), 400, "prompt",
               "context_length_exceeded");
  // Body over the 8 MiB limit.
  expect_error(c->Post("/v1/completions", std::string(9 << 20, ' '), "application/json"), 413);
  expect_error(c->Get("/v2/nothing"), 404);
  expect_error(c->Get("/v1/completions"), 405);
  auto del = c->Delete("/health");
  expect_error(del, 405);
  EXPECT_EQ(del->get_header_value("Allow"), "GET");
  // The server is still fine.
  EXPECT_EQ(body_of(post(*c, "/v1/completions", ok))["choices"].size(), 1u);
}

TEST_F(Http, TokenizeDetokenizeRoundTrip) {
  auto c = client();
  const std::string text = "It is a truth universally acknowledged, caf\xc3\xa9!";
  const json t = body_of(post(*c, "/tokenize", {{"prompt", text}}));
  ASSERT_GT(t["count"].get<int>(), 3);
  EXPECT_EQ(t["tokens"].size(), t["count"].get<size_t>());
  EXPECT_EQ(t["max_model_len"], 256);
  const json plain = body_of(post(*c, "/tokenize", {{"prompt", text}, {"add_special_tokens", false}}));
  EXPECT_EQ(body_of(post(*c, "/detokenize", {{"tokens", plain["tokens"]}}))["prompt"], text);
  expect_error(post(*c, "/detokenize", {{"tokens", {1, -4}}}), 400, "tokens");
  expect_error(post(*c, "/tokenize", {{"prompt", 3}}), 400, "prompt");
  const json chat = body_of(post(*c, "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}));
  EXPECT_GT(chat["count"].get<int>(), 1);
}

TEST_F(Http, MetricsExposition) {
  auto c = client();
  ASSERT_EQ(post(*c, "/v1/completions", {{"model", "demo-target"}, {"prompt", "x"}, {"max_tokens", 3}})->status, 200);
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  expect_valid_exposition(m->body);
  for (const char* name : {"peregrine_kv_blocks_used", "peregrine_requests_running", "peregrine_requests_waiting",
                           "peregrine_kv_cache_usage_perc", "peregrine_prefix_cache_hit_rate", "peregrine_prompt_tokens_total",
                           "peregrine_generation_tokens_total", "peregrine_num_preemptions_total"}) {
    EXPECT_GE(metric(m->body, name), 0) << name;
  }
  EXPECT_GE(metric(m->body, "peregrine_generation_tokens_total"), 3);
  EXPECT_GE(metric(m->body, "peregrine_request_success_total{finished_reason=\"length\"}"), 1);
  EXPECT_GE(metric(m->body, "peregrine_time_to_first_token_seconds_count"), 1);
  // The engine publishes its stats after the step that ended the request, a moment after the
  // response went out: idle means 0 blocks held soon after.
  double used = metric(m->body, "peregrine_kv_blocks_used");
  for (int i = 0; i < 200 && used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    used = metric(c->Get("/metrics")->body, "peregrine_kv_blocks_used");
  }
  EXPECT_EQ(used, 0);
}

// Opens a raw connection, sends a streaming request, reads until the first event, and closes.
void start_stream_and_hang_up(int port, const json& request) {
  test::RawConnection c(port);
  ASSERT_TRUE(c.send(test::post_request("/v1/completions", request.dump())));
  for (int i = 0; i < 100 && c.unread().find("data: ") == std::string::npos; ++i)
    c.closed_within(std::chrono::milliseconds(50));
  EXPECT_NE(c.unread().find("data: "), std::string::npos) << c.unread();
}

TEST_F(Http, DisconnectMidStreamCancelsAndFreesBlocks) {
  auto c = client();
  const double aborted_before =
      metric(c->Get("/metrics")->body, "peregrine_request_success_total{finished_reason=\"abort\"}");
  // 16 choices of a whole context each: far more work than the time to notice the hang-up, even
  // on a loaded machine (a single demo stream could finish before the server saw it go).
  start_stream_and_hang_up(server_->port(), {{"model", "demo-target"},
                                             {"prompt", "It was"},
                                             {"n", 16},
                                             {"stream", true},
                                             {"ignore_eos", true}});
  double aborted = aborted_before, used = -1;
  for (int i = 0; i < 500; ++i) {
    const std::string m = c->Get("/metrics")->body;
    aborted = metric(m, "peregrine_request_success_total{finished_reason=\"abort\"}");
    used = metric(m, "peregrine_kv_blocks_used");
    if (aborted >= aborted_before + 16 && used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(aborted, aborted_before + 16) << "the request's choices were not cancelled when its client left";
  EXPECT_EQ(used, 0);
}

TEST(HttpAuth, BearerKeyOnApiRoutesOnly) {
  ServerProcess s(std::vector<std::string>{"-t", "1", "--max-seqs", "4", "--kv-cache-memory", "16MiB", "--api-key", "s3cret",
                                           "--served-model-name", "austen"});
  auto c = s.client();
  expect_error(c->Get("/v1/models"), 401, "", "invalid_api_key");
  expect_error(c->Get("/v1/models", {{"Authorization", "Bearer s3crex"}}), 401);
  expect_error(c->Get("/v1/models", {{"Authorization", "Basic s3cret"}}), 401);
  expect_error(c->Post("/tokenize", json{{"prompt", "x"}}.dump(), "application/json"), 401);
  expect_error(c->Post("/v1/completions", json{{"model", "austen"}, {"prompt", "x"}}.dump(), "application/json"), 401);
  EXPECT_EQ(c->Get("/health")->status, 200);
  EXPECT_EQ(c->Get("/metrics")->status, 200);
  c->set_bearer_token_auth("s3cret");
  EXPECT_EQ(body_of(c->Get("/v1/models"))["data"][0]["id"], "austen");
  EXPECT_EQ(post(*c, "/v1/completions", {{"model", "austen"}, {"prompt", "x"}, {"max_tokens", 2}})->status, 200);
  EXPECT_EQ(s.terminate(), 0);
}

// Polls /metrics until the gauge reaches `at_least`.
void wait_for_gauge(ServerProcess& s, const std::string& name, double at_least) {
  auto c = s.client();
  for (int i = 0; i < 2000; ++i) {
    auto m = c->Get("/metrics");
    if (m && metric(m->body, name) >= at_least) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << name << " never reached " << at_least;
}

void wait_until_running(ServerProcess& s) { wait_for_gauge(s, "peregrine_requests_running", 1); }

TEST(HttpQueue, FullQueueGets429WithRetryAfter) {
  ServerProcess s(std::vector<std::string>{"-t", "1", "--max-seqs", "1", "--max-queue", "1", "--kv-cache-memory", "16MiB"});
  const json long_request = {{"model", "demo-target"}, {"prompt", "It was"}, {"ignore_eos", true}};
  std::thread a([&] { s.client()->Post("/v1/completions", long_request.dump(), "application/json"); });
  wait_until_running(s);
  std::thread b([&] { s.client()->Post("/v1/completions", long_request.dump(), "application/json"); });
  // B waits behind A (one sequence at a time): the queue of one is full.
  wait_for_gauge(s, "peregrine_requests_waiting", 1);
  auto c = s.client();
  auto r = post(*c, "/v1/completions", {{"model", "demo-target"}, {"prompt", "x"}, {"max_tokens", 1}});
  expect_error(r, 429, "", "queue_full");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  a.join();
  b.join();
  EXPECT_EQ(post(*c, "/v1/completions", {{"model", "demo-target"}, {"prompt", "x"}, {"max_tokens", 1}})->status, 200);
  EXPECT_EQ(s.terminate(), 0);
}

TEST(HttpShutdown, InFlightStreamFinishesWithinGrace) {
  ServerProcess s(std::vector<std::string>{"-t", "1", "--max-seqs", "4", "--kv-cache-memory", "16MiB"});
  std::string body;
  std::thread stream([&] {
    auto r = s.client()->Post("/v1/completions",
                              json{{"model", "demo-target"}, {"prompt", "It was"}, {"stream", true}, {"ignore_eos", true}}.dump(),
                              "application/json");
    if (r) body = r->body;
  });
  wait_until_running(s);
  EXPECT_EQ(s.terminate(), 0);
  stream.join();
  const std::vector<json> events = sse_payloads(body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  // The listening socket is gone.
  EXPECT_FALSE(s.client()->Get("/health"));
}

TEST(HttpShutdown, ZeroGraceCancelsButStillTerminatesTheStream) {
  ServerProcess s(std::vector<std::string>{"-t", "1", "--max-seqs", "4", "--kv-cache-memory", "16MiB", "--shutdown-grace", "0"});
  std::string body;
  std::thread stream([&] {
    auto r = s.client()->Post("/v1/chat/completions",
                              json{{"model", "demo-target"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                   {"stream", true}, {"ignore_eos", true}}.dump(),
                              "application/json");
    if (r) body = r->body;
  });
  wait_until_running(s);
  EXPECT_EQ(s.terminate(), 0);
  stream.join();
  const std::vector<json> events = sse_payloads(body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "abort");
}

TEST(HttpLoading, HealthIs503UntilTheModelIsSet) {
  ServerOptions options;
  options.port = 0;
  options.io_threads = 1;
  HttpServer server(options);
  const int port = server.bind();
  std::thread listener([&] { server.listen(); });
  httplib::Client c("127.0.0.1", port);
  expect_error(c.Get("/health"), 503, "", "not_ready");
  expect_error(c.Post("/v1/completions", json{{"model", "m"}, {"prompt", "x"}}.dump(), "application/json"), 503);
  const std::string metrics = c.Get("/metrics")->body;
  expect_valid_exposition(metrics);
  EXPECT_EQ(metric(metrics, "peregrine_model_ready"), 0);
  server.shutdown(std::chrono::milliseconds(0));
  listener.join();
}

}  // namespace
}  // namespace peregrine::server
