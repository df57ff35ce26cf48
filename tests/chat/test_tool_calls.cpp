// Tool calls in chat (chat/tool_calls.h): the format chosen per template, the fallback rendering,
// the parser on fixed texts (whole and growing a byte at a time, as a stream sees them), and the
// grammar of forced calls (what it accepts and refuses, checked with the grammar matcher).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"

namespace peregrine {
namespace {

using Json = nlohmann::ordered_json;

const std::vector<std::string> kNames = {"get_weather", "add"};

Json weather_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
      "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}})");
}

ParsedToolOutput parse(ToolCallFormat f, std::string_view text, bool final = true) {
  return parse_tool_output(f, text, kNames, final);
}

TEST(ToolCallFormat, ChosenByTemplate) {
  EXPECT_EQ(tool_call_format(ChatTemplate::fallback()), ToolCallFormat::Fallback);
  EXPECT_EQ(tool_call_format(ChatTemplate::parse("{% if tools %}<tool_call>{% endif %}{{ messages[0].content }}")),
            ToolCallFormat::Hermes);
  EXPECT_EQ(
      tool_call_format(ChatTemplate::parse(
          "{% if tools %}{{ '{\"name\": function name, \"parameters\": dictionary of argument name' }}{% endif %}")),
      ToolCallFormat::Llama3Json);
  // Speaks of tools in an unknown way: the fallback, whose format we can read.
  EXPECT_EQ(tool_call_format(ChatTemplate::parse("{% if tools %}[AVAILABLE_TOOLS]{% endif %}")),
            ToolCallFormat::Fallback);
}

TEST(ToolCallParser, HermesWholeTexts) {
  auto p = parse(ToolCallFormat::Hermes, "Just text.");
  EXPECT_EQ(p.content, "Just text.");
  EXPECT_TRUE(p.calls.empty());

  p = parse(
      ToolCallFormat::Hermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_TRUE(p.calls[0].complete);

  // Two calls, keys in the other order, braces inside strings, text after.
  p = parse(ToolCallFormat::Hermes,
            "<tool_call>{\"arguments\": {\"a\": 1, \"b\": \"}{\"}, \"name\": \"add\"}</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>\nDone.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "add");
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": 1, \"b\": \"}{\"}");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.content, "Done.");

  // Arguments written as a string holding an object are unwrapped.
  p = parse(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 2}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": 2}");

  // The model stopped right after the object, without the closing tag.
  p = parse(ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_TRUE(p.calls[0].complete);
}

TEST(ToolCallParser, HermesNotCallsAreText) {
  for (const char* text :
       {"<tool_call>{\"name\": \"unknown\", \"arguments\": {}}</tool_call>", "<tool_call>not json</tool_call>",
        "<tool_call>{\"name\": \"add\", \"arguments\": [1, 2]}</tool_call>",
        "<tool_call>{\"name\": \"add\", \"arguments\": {}} trailing</tool_call>", "a <tool_call without end",
        "<tool_call>{\"name\": 5}</tool_call>"}) {
    const auto p = parse(ToolCallFormat::Hermes, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallParser, HermesCutShortStaysACall) {
  const auto p =
      parse(ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_FALSE(p.calls[0].complete);
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Pa");
}

TEST(ToolCallParser, Llama3Texts) {
  auto p = parse(ToolCallFormat::Llama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(p.content, "");

  p = parse(ToolCallFormat::Llama3Json,
            "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"add\", \"parameters\": {}}");
  ASSERT_EQ(p.calls.size(), 2u);

  for (const char* text : {"The weather is fine.", "{\"name\": \"nope\", \"parameters\": {}}", "{\"a\": 1}", "{oops"}) {
    p = parse(ToolCallFormat::Llama3Json, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// Feeding a text a byte at a time (non-final parses, then a final one): content and every call's
// arguments only ever grow at their ends, and the end agrees with parsing the whole text.
void check_growth(ToolCallFormat f, const std::string& text) {
  std::string content;
  std::vector<ParsedToolCall> calls;
  for (size_t n = 0; n <= text.size(); ++n) {
    const bool final = n == text.size();
    const auto p = parse(f, std::string_view(text).substr(0, n), final);
    ASSERT_TRUE(p.content.starts_with(content)) << "at " << n << " of " << text;
    ASSERT_GE(p.calls.size(), calls.size()) << "at " << n << " of " << text;
    for (size_t i = 0; i < calls.size(); ++i) {
      ASSERT_EQ(p.calls[i].name, calls[i].name);
      ASSERT_TRUE(p.calls[i].arguments.starts_with(calls[i].arguments)) << "at " << n << " of " << text;
    }
    content = p.content;
    calls = p.calls;
  }
  const auto whole = parse(f, text);
  EXPECT_EQ(content, whole.content) << text;
  ASSERT_EQ(calls.size(), whole.calls.size()) << text;
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].arguments, whole.calls[i].arguments);
}

TEST(ToolCallParser, StreamingGrowsOnlyAtTheEnd) {
  check_growth(ToolCallFormat::Hermes, "Plain text with < and <tool and spaces   ");
  check_growth(
      ToolCallFormat::Hermes,
      "Checking.  <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a}\\\"b\"}}\n</tool_call>"
      "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": [1, {\"b\": 2}]}}\n</tool_call> ok");
  check_growth(ToolCallFormat::Fallback, "<tool_call>{\"name\": \"add\", \"arguments\": {\"x\": true}}</tool_call>");
  check_growth(ToolCallFormat::Llama3Json, "{\"name\": \"add\", \"parameters\": {\"a\": 1.5e3, \"s\": \"x y\"}}");
  check_growth(ToolCallFormat::Llama3Json, "Sure, here it is.");
  check_growth(ToolCallFormat::Llama3Json, "  <|python_tag|>{\"name\": \"add\", \"parameters\": {}}");
}

TEST(ToolCallParser, HoldsBackWhatMayBecomeACall) {
  EXPECT_EQ(parse(ToolCallFormat::Hermes, "Hello <tool_c", false).content, "Hello");
  EXPECT_EQ(parse(ToolCallFormat::Hermes, "Hello <tool_c", true).content, "Hello <tool_c");
  EXPECT_EQ(parse(ToolCallFormat::Hermes, "Hello <tool_call>{\"na", false).content, "Hello");
  EXPECT_EQ(parse(ToolCallFormat::Llama3Json, "{\"name\": \"ad", false).content, "");
  const auto p = parse(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\"", false);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"a\"");
}

TEST(ToolFallback, RendersToolsCallsAndResults) {
  const Json tools = Json::array({weather_tool()});
  const std::vector<ChatMessage> messages = {
      {"system", "Be brief."},
      {"user", "Weather in Paris?"},
      {"assistant", "", {{"call_1", "get_weather", R"({"city": "Paris", "unit": "c"})"}}},
      {"tool", "18 C", {}, "call_1"},
      {"tool", "sunny", {}, "call_2"},
  };
  const auto folded = fallback_tool_messages(messages, tools);
  ASSERT_EQ(folded.size(), 4u);
  EXPECT_EQ(folded[0].role, "system");
  EXPECT_TRUE(folded[0].content.starts_with("Be brief.\n\n# Tools\n"));
  EXPECT_NE(folded[0].content.find(weather_tool().dump()), std::string::npos);
  EXPECT_NE(folded[0].content.find("<tool_call></tool_call>"), std::string::npos);
  EXPECT_EQ(
      folded[2].content,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"c\"}}\n</tool_call>");
  EXPECT_EQ(folded[3].role, "user");
  EXPECT_EQ(folded[3].content, "<tool_response>\n18 C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>");
  // What the model answers in that format is read back as the same call.
  const auto p = parse(ToolCallFormat::Fallback, folded[2].content);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");

  // Without tools (tool_choice "none") nothing is added, and no system message is made up.
  const auto plain = fallback_tool_messages(std::span(messages).subspan(1), nullptr);
  EXPECT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[0].role, "user");

  const std::string prompt = ChatTemplate::fallback().render(folded, true, "", "");
  EXPECT_TRUE(prompt.starts_with("<|im_start|>system\nBe brief.\n\n# Tools"));
  EXPECT_TRUE(prompt.ends_with("</tool_response><|im_end|>\n<|im_start|>assistant\n"));
}

TEST(ToolTemplate, NativeTemplateSeesToolsAndCalls) {
  const ChatTemplate t = ChatTemplate::parse(
      "{% for tool in tools %}{{ tool.function.name }};{% endfor %}"
      "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
      "{% for c in m.tool_calls %}{{ c.id }}:{{ c.function.name }}{{ c.function.arguments | tojson }}"
      "{{ c.function.arguments.city }}{% endfor %}{% if m.tool_call_id is defined %}<{{ m.tool_call_id }}>{% endif %}"
      "{% endfor %}");
  const std::vector<ChatMessage> messages = {
      {"assistant", "", {{"c1", "get_weather", R"({"unit": "c", "city": "Rome"})"}, {"c2", "add", "not json"}}},
      {"tool", "20", {}, "c1"}};
  EXPECT_EQ(
      t.render(messages, false, "", "", Json::array({weather_tool()})),
      "get_weather;[assistant]c1:get_weather{\"unit\": \"c\", \"city\": \"Rome\"}Romec2:add\"not json\"[tool]20<c1>");
  // No tools: `tools` is undefined.
  EXPECT_EQ(ChatTemplate::parse("{{ tools is defined }}").render({}, false, "", ""), "False");
}

bool accepts(const std::string& gbnf, std::string_view text) {
  GrammarMatcher m(std::make_shared<const Grammar>(compile_gbnf(gbnf)));
  return m.accept_bytes(text) && m.is_accepting();
}

TEST(ToolGrammar, ForcedCallsMatchTheSchemas) {
  const Json add_params = Json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
          "additionalProperties": false})");
  const std::vector<ToolSchema> tools = {{"get_weather", weather_tool()["function"]["parameters"]},
                                         {"add", add_params}};
  const std::string one = tool_call_gbnf(ToolCallFormat::Hermes, tools, false);
  const std::string call_w =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"f\"}}\n</tool_call>";
  const std::string call_a = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}\n</tool_call>";
  EXPECT_TRUE(accepts(one, call_w));
  EXPECT_TRUE(accepts(one, call_a));
  EXPECT_FALSE(accepts(one, call_a + "\n" + call_w));  // one call only
  EXPECT_FALSE(accepts(one, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  EXPECT_FALSE(accepts(
      one,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"k\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(one, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(one, "Sure! " + call_a));

  const std::string parallel = tool_call_gbnf(ToolCallFormat::Hermes, tools, true);
  EXPECT_TRUE(accepts(parallel, call_a + "\n" + call_w + "\n" + call_a));
  // Whatever the grammar accepts, the parser reads back as those calls.
  const auto p = parse(ToolCallFormat::Hermes, call_a + "\n" + call_w);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].arguments, "{\"city\": \"Oslo\", \"unit\": \"f\"}");

  // A named function: only its calls.
  const std::string named = tool_call_gbnf(ToolCallFormat::Fallback, std::span(tools).subspan(1, 1), false);
  EXPECT_TRUE(accepts(named, call_a));
  EXPECT_FALSE(accepts(named, call_w));

  const std::string llama = tool_call_gbnf(ToolCallFormat::Llama3Json, tools, true);
  EXPECT_TRUE(accepts(llama, "{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}"));
  EXPECT_FALSE(accepts(llama, "{\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": 4}}"));
  EXPECT_EQ(parse(ToolCallFormat::Llama3Json, "{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}").calls.size(),
            1u);
}

TEST(ToolGrammar, SchemasWithTheirOwnDefinitionsStaySeparate) {
  // Both schemas define `item` and use primitives; the prefixes keep their rules apart.
  const Json a = Json::parse(R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/item"}}, "required": ["x"],
      "additionalProperties": false, "$defs": {"item": {"type": "integer"}}})");
  const Json b = Json::parse(R"({"type": "object", "properties": {"x": {"$ref": "#/$defs/item"}}, "required": ["x"],
      "additionalProperties": false, "$defs": {"item": {"type": "string", "maxLength": 2}}})");
  const std::vector<ToolSchema> tools = {{"a", a}, {"b", b}};
  const std::string g = tool_call_gbnf(ToolCallFormat::Hermes, tools, false);
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 12}}\n</tool_call>"));
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"hi\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"hi\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 12}}\n</tool_call>"));
}

}  // namespace
}  // namespace peregrine
