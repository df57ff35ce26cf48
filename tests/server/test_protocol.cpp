// Units of the server: request parsing and validation, response and chunk shapes, SSE framing,
// the API-key compare, the metrics exposition.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "server/api_error.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "exposition_check.h"

namespace peregrine::server {
namespace {

using nlohmann::json;

// The ApiError a parse throws (status and param), or fails the test.
ApiError parse_error(const json& body, bool chat = false) {
  try {
    if (chat) parse_chat_request(body);
    else parse_completion_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body.dump();
  return server_error("none");
}

std::string param_of(const ApiError& e) {
  const json p = e.body()["error"]["param"];
  return p.is_null() ? "" : p.get<std::string>();
}

TEST(Parse, CompletionDefaultsAndFields) {
  const GenerationRequest r = parse_completion_request(
      {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 7}, {"temperature", 0.5}, {"top_p", 0.9}, {"n", 3},
       {"stop", "\n"}, {"seed", 42}, {"top_k", 5}, {"min_p", 0.1}, {"repetition_penalty", 1.2},
       {"presence_penalty", 0.5}, {"frequency_penalty", -0.5}, {"logprobs", 2}, {"logit_bias", {{"17", -100}}},
       {"user", "u"}, {"some_unknown_field", {1, 2}}});
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r.prompts[0]), "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.2f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.sampling.n_logprobs, 2);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0].first, 17);
  EXPECT_FALSE(r.stream);

  const GenerationRequest d = parse_completion_request({{"model", "m"}, {"prompt", "x"}});
  EXPECT_FALSE(d.max_tokens.has_value());  // the rest of the context
  EXPECT_EQ(d.n, 1);
  EXPECT_FLOAT_EQ(d.sampling.temperature, 1.0f);
  EXPECT_FALSE(d.logprobs);
}

TEST(Parse, PromptForms) {
  auto prompts = [](const json& p) { return parse_completion_request({{"model", "m"}, {"prompt", p}}).prompts; };
  EXPECT_EQ(prompts(json::array({"a", "b"})).size(), 2u);
  const auto ids = prompts(json::array({1, 2, 3}));
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids[0]), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(prompts(json::array({json::array({1}), json::array({2, 3})})).size(), 2u);
  for (const json& bad : {json(5), json::array(), json::array({"a", 1}), json::array({json::array()}), json::array({-1}),
                          json::array({1.5}), json::object()}) {
    EXPECT_EQ(param_of(parse_error({{"model", "m"}, {"prompt", bad}})), "prompt") << bad.dump();
  }
}

TEST(Parse, RejectsWrongTypesAndAbsurdValues) {
  const json base = {{"model", "m"}, {"prompt", "x"}};
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"max_tokens", "5"}}, "max_tokens"},   {{{"max_tokens", -1}}, "max_tokens"},
      {{{"max_tokens", 0}}, "max_tokens"},     {{{"max_tokens", 2.5}}, "max_tokens"},
      {{{"max_tokens", 1e300}}, "max_tokens"}, {{{"temperature", -0.1}}, "temperature"},
      {{{"temperature", 2.5}}, "temperature"}, {{{"temperature", "hot"}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},               {{{"top_p", 1.5}}, "top_p"},
      {{{"n", 0}}, "n"},                       {{{"n", 17}}, "n"},
      {{{"stream", "yes"}}, "stream"},         {{{"stop", 5}}, "stop"},
      {{{"stop", {"a", "b", "c", "d", "e"}}}, "stop"}, {{{"stop", {""}}}, "stop"},
      {{{"logprobs", 21}}, "logprobs"},        {{{"logit_bias", {{"x", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"3", 101}}}}, "logit_bias"}, {{{"presence_penalty", 3}}, "presence_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"}, {{{"min_p", 2}}, "min_p"},
      {{{"model", 3}}, "model"},               {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
  };
  for (const auto& [patch, param] : cases) {
    json body = base;
    body.update(patch);
    const ApiError e = parse_error(body);
    EXPECT_EQ(e.status(), 400) << body.dump();
    EXPECT_EQ(param_of(e), param) << body.dump();
  }
  EXPECT_EQ(param_of(parse_error({{"prompt", "x"}})), "model");
  EXPECT_EQ(param_of(parse_error({{"model", "m"}})), "prompt");
  EXPECT_EQ(parse_error(json::array({1})).status(), 400);
}

TEST(Parse, ChatMessages) {
  const GenerationRequest r = parse_chat_request(
      {{"model", "m"},
       {"messages", {{{"role", "system"}, {"content", "be brief"}},
                     {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
       {"max_completion_tokens", 9}, {"logprobs", true}, {"top_logprobs", 3}, {"stream", true},
       {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.include_usage);

  EXPECT_EQ(param_of(parse_error({{"model", "m"}}, true)), "messages");
  EXPECT_EQ(param_of(parse_error({{"model", "m"}, {"messages", json::array()}}, true)), "messages");
  EXPECT_EQ(param_of(parse_error({{"model", "m"}, {"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, true)),
            "messages[0].role");
  EXPECT_EQ(param_of(parse_error({{"model", "m"}, {"messages", {{{"role", "user"}, {"content", 5}}}}}, true)),
            "messages[0].content");
  EXPECT_EQ(param_of(parse_error({{"model", "m"},
                                  {"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
                                 true)),
            "messages[0].content");
  EXPECT_EQ(param_of(parse_error({{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}},
                                 true)),
            "top_logprobs");
}

TEST(Parse, ResponseFormatAndGrammar) {
  const json base = {{"model", "m"}, {"prompt", "x"}};
  auto parse = [&](const json& patch, bool chat = false) {
    json body = chat ? json{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}} : base;
    body.update(patch);
    return chat ? parse_chat_request(body) : parse_completion_request(body);
  };
  EXPECT_EQ(parse(json::object()).constraint.kind, OutputConstraint::Kind::None);
  EXPECT_EQ(parse({{"response_format", {{"type", "text"}}}}).constraint.kind, OutputConstraint::Kind::None);
  for (bool chat : {false, true}) {
    EXPECT_EQ(parse({{"response_format", {{"type", "json_object"}}}}, chat).constraint.kind,
              OutputConstraint::Kind::JsonObject);
    const GenerationRequest r =
        parse({{"response_format",
                {{"type", "json_schema"},
                 {"json_schema", {{"name", "p"}, {"strict", true}, {"schema", {{"type", "integer"}}}}}}}},
              chat);
    EXPECT_EQ(r.constraint.kind, OutputConstraint::Kind::JsonSchema);
    EXPECT_EQ(r.constraint.schema, nlohmann::ordered_json({{"type", "integer"}}));
    EXPECT_EQ(r.constraint.param, "response_format");
    const GenerationRequest g = parse({{"grammar", "root ::= \"a\""}}, chat);
    EXPECT_EQ(g.constraint.kind, OutputConstraint::Kind::Grammar);
    EXPECT_EQ(g.constraint.grammar, "root ::= \"a\"");
  }
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"response_format", "json"}}, "response_format"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format"},
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}, "response_format"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", 5}}}}}}, "response_format"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}, {"strict", "yes"}}}}}},
       "response_format"},
      {{{"grammar", 5}}, "grammar"},
      {{{"grammar", std::string(kMaxGrammarBytes + 1, 'x')}}, "grammar"},
      {{{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}, "grammar"},
  };
  for (const auto& [patch, param] : bad) {
    json body = base;
    body.update(patch);
    const ApiError e = parse_error(body);
    EXPECT_EQ(e.status(), 400) << body.dump();
    EXPECT_EQ(param_of(e), param) << body.dump();
  }
  // The schema's properties keep the order the client wrote them in.
  GenerationRequest ordered =
      parse({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}}}}}});
  restore_schema_order(ordered, R"({"response_format": {"type": "json_schema", "json_schema": {"schema":
      {"properties": {"zeta": {}, "alpha": {}}}}}})");
  EXPECT_EQ(ordered.constraint.schema["properties"].begin().key(), "zeta");
}

TEST(Parse, BodyJsonAndUtf8) {
  EXPECT_THROW(parse_body("{"), ApiError);
  EXPECT_THROW(parse_body("[1]"), ApiError);
  EXPECT_THROW(parse_body("{\"prompt\": \"\xff\xfe\"}"), ApiError);     // invalid UTF-8
  EXPECT_THROW(parse_body("{\"prompt\": \"\\ud800\"}"), ApiError);      // lone surrogate
  EXPECT_THROW(parse_body("{\"temperature\": NaN}"), ApiError);
  EXPECT_NO_THROW(parse_body("{\"prompt\": \"caf\xc3\xa9\"}"));
}

TEST(Response, ErrorObjectShape) {
  const json e = model_not_found("x").body();
  ASSERT_TRUE(e.contains("error"));
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(e["error"].contains(k)) << k;
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_EQ(queue_full().status(), 429);
  EXPECT_TRUE(invalid_request("m").body()["error"]["param"].is_null());
}

TEST(Response, ChunksAndUsage) {
  ResponseMeta meta{Endpoint::ChatCompletions, "chatcmpl-1", 5, "m"};
  const json first = chat_chunk(meta, 0, {{"role", "assistant"}, {"content", ""}}, nullptr, RequestFinish::None, false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  const json last = chat_chunk(meta, 1, json::object(), nullptr, RequestFinish::Length, true);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["index"], 1);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_TRUE(last["usage"].is_null());
  const json usage = usage_chunk(meta, usage_json(3, 4));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  meta.endpoint = Endpoint::Completions;
  const json text = completion_chunk(meta, 0, "hi", nullptr, RequestFinish::Stop, false);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "hi");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(finish_reason_json(RequestFinish::Cancelled), "abort");
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Invalid UTF-8 never throws on the way out.
  EXPECT_NO_THROW(sse_event(json{{"t", std::string("\xff")}}));
}

TEST(Auth, BearerCompare) {
  EXPECT_TRUE(bearer_matches("Bearer s3cret", "s3cret"));
  EXPECT_TRUE(bearer_matches("bearer s3cret", "s3cret"));
  EXPECT_FALSE(bearer_matches("Bearer s3cre", "s3cret"));
  EXPECT_FALSE(bearer_matches("Bearer s3crett", "s3cret"));
  EXPECT_FALSE(bearer_matches("s3cret", "s3cret"));
  EXPECT_FALSE(bearer_matches("", "s3cret"));
  EXPECT_FALSE(bearer_matches("Basic s3cret", "s3cret"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("a", ""));
}

TEST(Metrics, ExpositionIsValidAndCounts) {
  Metrics m;
  m.add_prompt_tokens(5);
  m.observe_token(true, 0.003);
  m.observe_token(false, 0.002);
  m.observe_finish(RequestFinish::Length, 0.01);
  m.observe_finish(RequestFinish::Cancelled, 0.02);
  m.count_http(200);
  EngineStats stats;
  stats.kv_blocks_total = 10;
  const std::string text = m.render(&stats);
  expect_valid_exposition(text);
  for (const char* needle : {"peregrine_prompt_tokens_total 5\n", "peregrine_generation_tokens_total 2\n",
                             "peregrine_request_success_total{finished_reason=\"length\"} 1\n",
                             "peregrine_request_success_total{finished_reason=\"abort\"} 1\n",
                             "peregrine_time_to_first_token_seconds_count 1\n",
                             "peregrine_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
                             "peregrine_time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n",
                             "peregrine_inter_token_latency_seconds_count 1\n", "peregrine_kv_blocks_used 0\n",
                             "peregrine_requests_running 0\n", "peregrine_requests_waiting 0\n",
                             "peregrine_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 2\n"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle;
  }
  expect_valid_exposition(m.render(nullptr));
}

}  // namespace
}  // namespace peregrine::server
