// Units of the server's tool calling: parsing tools / tool_choice / tool messages, the forced
// call's constraint, and the stream of OpenAI deltas a choice's growing text turns into.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/request_preparer.h"
#include "server/tool_call_stream.h"

namespace peregrine::server {
namespace {

using nlohmann::json;

json weather() {
  return json::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
}

json chat(json extra) {
  json body = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  body.update(extra);
  return body;
}

std::string error_param(const json& body) {
  try {
    parse_chat_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    const json p = e.body()["error"]["param"];
    return p.is_null() ? "" : p.get<std::string>();
  }
  ADD_FAILURE() << "no error for " << body.dump();
  return "";
}

TEST(ToolRequestParse, ChoicesAndDefaults) {
  GenerationRequest r = parse_chat_request(chat({{"tools", json::array({weather()})}}));
  EXPECT_EQ(r.tools.choice, ToolRequest::Choice::Auto);
  EXPECT_TRUE(r.tools.active());
  EXPECT_FALSE(r.tools.forced());
  EXPECT_TRUE(r.tools.parallel);
  EXPECT_EQ(r.tools.names(), std::vector<std::string>{"get_weather"});

  r = parse_chat_request(chat({{"tools", json::array({weather()})}, {"tool_choice", "none"}}));
  EXPECT_FALSE(r.tools.active());
  r = parse_chat_request(chat({{"tools", json::array({weather()})},
                               {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                               {"parallel_tool_calls", false}}));
  EXPECT_TRUE(r.tools.forced());
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_EQ(r.tools.callable().size(), 1u);
  // No tools at all: nothing is active, "none" is accepted.
  EXPECT_FALSE(parse_chat_request(chat({{"tool_choice", "none"}})).tools.active());
}

TEST(ToolRequestParse, Messages) {
  const json messages = json::parse(R"([{"role": "user", "content": "x"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Bath\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18"}])");
  const GenerationRequest r = parse_chat_request(chat({{"messages", messages}}));
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Bath\"}");
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
}

TEST(ToolRequestParse, BadInput) {
  const json tools = json::array({weather()});
  EXPECT_EQ(error_param(chat({{"tools", tools}, {"tool_choice", "always"}})), "tool_choice");
  EXPECT_EQ(
      error_param(chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}})),
      "tool_choice");
  EXPECT_EQ(error_param(chat({{"tool_choice", "auto"}})), "tool_choice");
  EXPECT_EQ(error_param(chat({{"tools", "get_weather"}})), "tools");
  EXPECT_EQ(error_param(chat({{"tools", json::array({1})}})), "tools[0]");
  json bad = weather();
  bad["function"]["parameters"] = {{"type", "object"}, {"patternProperties", json::object()}};
  EXPECT_EQ(error_param(chat({{"tools", json::array({bad})}})), "tools[0].function.parameters");
  bad = weather();
  bad["function"]["name"] = std::string(65, 'a');
  EXPECT_EQ(error_param(chat({{"tools", json::array({bad})}})), "tools[0].function.name");
  EXPECT_EQ(error_param(chat({{"tools", json::array({weather(), weather()})}})), "tools[1].function.name");
  EXPECT_EQ(error_param(chat({{"tools", tools}, {"grammar", "root ::= \"a\""}})), "grammar");
  EXPECT_EQ(error_param(chat({{"tools", tools}, {"parallel_tool_calls", "yes"}})), "parallel_tool_calls");
  EXPECT_EQ(error_param(chat({{"messages", json::parse(R"([{"role": "tool", "content": "x"}])")}})),
            "messages[0].tool_call_id");
  EXPECT_EQ(
      error_param(chat(
          {{"messages",
            json::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}])")}})),
      "messages[0].tool_calls[0].function");
  try {
    parse_completion_request({{"model", "m"}, {"prompt", "x"}, {"tools", tools}});
    ADD_FAILURE() << "tools accepted on completions";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.body()["error"]["param"], "tools");
  }
}

TEST(ToolConstraint, ForcedChoicesGetAGrammar) {
  GenerationRequest r = parse_chat_request(chat({{"tools", json::array({weather()})}, {"tool_choice", "required"}}));
  const OutputConstraint c = RequestPreparer::tool_constraint(ToolCallFormat::Fallback, r.tools);
  EXPECT_EQ(c.kind, OutputConstraint::Kind::Grammar);
  EXPECT_EQ(c.param, "tools");
  EXPECT_NE(c.grammar.find("get_weather"), std::string::npos);
  r = parse_chat_request(chat({{"tools", json::array({weather()})}}));
  EXPECT_EQ(RequestPreparer::tool_constraint(ToolCallFormat::Fallback, r.tools).kind, OutputConstraint::Kind::None);
}

TEST(ToolCallStream, DeltasAsOpenAISendsThem) {
  ToolCallStream s(ToolCallFormat::Hermes, {"get_weather"});
  std::vector<json> all;
  for (const char* piece : {"Let me", " look. <tool", "_call>\n{\"name\": \"get_", "weather\", \"arguments\": {\"ci",
                            "ty\": \"Bath\"}}\n</tool_call>"}) {
    for (json& d : s.add(piece, false)) all.push_back(std::move(d));
  }
  for (json& d : s.add("", true)) all.push_back(std::move(d));
  ASSERT_GE(all.size(), 4u);
  EXPECT_EQ(all[0], json({{"content", "Let me"}}));
  EXPECT_EQ(all[1], json({{"content", " look."}}));
  const json first = all[2]["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "get_weather");
  EXPECT_EQ(first["function"]["arguments"], "");
  EXPECT_TRUE(first["id"].get<std::string>().starts_with("call_"));
  std::string arguments;
  for (size_t i = 3; i < all.size(); ++i) {
    ASSERT_TRUE(all[i].contains("tool_calls")) << all[i].dump();
    EXPECT_EQ(all[i]["tool_calls"][0]["index"], 0);
    EXPECT_FALSE(all[i]["tool_calls"][0].contains("id"));
    arguments += all[i]["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, "{\"city\": \"Bath\"}");
  EXPECT_TRUE(s.has_calls());

  const json m = s.message("Let me look. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(m["content"], "Let me look.");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{}");
  const json text = s.message("No calls here.");
  EXPECT_EQ(text["content"], "No calls here.");
  EXPECT_FALSE(text.contains("tool_calls"));
}

TEST(ToolCallStream, PlainTextIsStreamedWithTrailingSpaceHeldUntilTheEnd) {
  ToolCallStream s(ToolCallFormat::Fallback, {"f"});
  EXPECT_EQ(s.add("Hello ", false), std::vector<json>{json({{"content", "Hello"}})});
  EXPECT_EQ(s.add("world", false), std::vector<json>{json({{"content", " world"}})});
  EXPECT_EQ(s.add("\n", true), std::vector<json>{json({{"content", "\n"}})});
  EXPECT_FALSE(s.has_calls());
}

}  // namespace
}  // namespace peregrine::server
