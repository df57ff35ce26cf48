// Hostile and broken templates (a user can pass --chat-template FILE): every failure is a
// ChatTemplateError, never a crash, a hang or unbounded memory.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "jinja_test_util.h"

namespace peregrine {
namespace {

using test::jinja_error;
using test::jinja_render;

TEST(JinjaLimits, InfiniteWorkIsCut) {
  chat::RenderOptions opts;
  opts.limits.max_steps = 200'000;
  auto t0 = std::chrono::steady_clock::now();
  std::string err = jinja_error(
      "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}x"
      "{% endfor %}{% endfor %}{% endfor %}",
      opts);
  EXPECT_NE(err.find("step limit"), std::string::npos) << err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(JinjaLimits, HugeValuesAreRefused) {
  EXPECT_NE(jinja_error("{{ range(100000000000) | length }}").find("exceeds the limit"), std::string::npos);
  EXPECT_NE(jinja_error("{{ 'x' * 10000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(jinja_error("{{ [1] * 10000000000 }}").find("too large"), std::string::npos);
  // Doubling a string in a loop hits the size limit long before memory runs out.
  EXPECT_NE(jinja_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}")
                .find("exceeds the limit"),
            std::string::npos);
  // Printing one long string many times over trips the output limit.
  chat::RenderOptions opts;
  opts.limits.max_output_bytes = 1 << 20;
  EXPECT_NE(jinja_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", opts).find("exceeds"),
            std::string::npos);
  EXPECT_NE(jinja_error("{% set s = 'x' * 100000 %}{{ [s] * 100000 }}", opts).find("too large"), std::string::npos);
  EXPECT_NE(jinja_error("{{ 2 ** 100 }}").find("overflow"), std::string::npos);
  EXPECT_EQ(jinja_render("{{ (-1) ** 1000000000000 }}"), "1");  // fast, not a long loop
}

TEST(JinjaLimits, DeepNestingIsRefused) {
  std::string deep_parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(jinja_error(deep_parens).find("nests too deeply"), std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(jinja_error(deep_ifs).find("nests too deeply"), std::string::npos);
  std::string long_chain = "{{ x";
  for (int i = 0; i < 100000; ++i) long_chain += ".a";
  EXPECT_NE(jinja_error(long_chain + " }}").find("nests too deeply"), std::string::npos);
  std::string long_sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) long_sum += "+1";
  EXPECT_NE(jinja_error(long_sum + " }}").find("nests too deeply"), std::string::npos);
  // Values nested by a loop, and a namespace stored in itself.
  EXPECT_NE(jinja_error("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}")
                .find("levels deep"),
            std::string::npos);
  EXPECT_NE(jinja_error("{% set ns = namespace() %}{% set ns.me = ns %}").find("cannot contain itself"),
            std::string::npos);
  EXPECT_NE(jinja_error("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = [b] %}")
                .find("cannot contain itself"),
            std::string::npos);
}

// Random byte soup built from template-ish fragments, plus every prefix of real templates: the
// only allowed failure is ChatTemplateError.
TEST(JinjaFuzz, RandomAndTruncatedTemplatesOnlyThrowChatTemplateError) {
  const std::vector<std::string> pieces = {
      "{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " ", "\n", "if", "elif", "else", "endif", "for",
      "in", "endfor", "set", "endset", "=", "ns", "namespace(", ")", "(", "[", "]", "{", "}", ":",
      ",", ".", "|", "trim", "length", "tojson", "is", "not", "defined", "none", "and", "or", "'",
      "\"", "\\", "messages", "loop.index", "x", "1", "0", "-1", "2.5", "'a'", "\"b\"", "~", "*",
      "**", "//", "%", "==", "<", "range(", "raise_exception(", "break", "continue", "items()",
      "[1:]", "[::-1]", "strip()", "default(", "join(", "selectattr(", "'role'", "'equalto'", "\xff",
      "\xc3", "é", "10000", "9223372036854775807"};
  const std::vector<std::string> real = {
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      "{%- set ns = namespace(found=false) -%}{%- for m in messages -%}{%- if m['role'] == 'system' -%}"
      "{%- set ns.found = true -%}{%- endif -%}{%- endfor -%}{{ ns.found }}{{ messages[1:] | tojson(indent=2) }}",
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
      "{% for k, v in {'a': [1, 2.5, none]}.items() if k != 'b' %}{{ k ~ v | string | upper }}{% else %}e{% endfor %}"};
  chat::RenderOptions opts;
  opts.limits.max_steps = 100'000;
  opts.limits.max_output_bytes = 1 << 20;
  opts.limits.max_created_bytes = 16 << 20;
  opts.limits.max_list_items = 100'000;
  auto check = [&](const std::string& src) {
    try {
      test::jinja_render(src, test::sample_context(), opts);
    } catch (const ChatTemplateError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-ChatTemplateError " << e.what() << " for template: " << src;
    }
  };
  for (const auto& r : real)
    for (size_t n = 0; n <= r.size(); ++n) check(r.substr(0, n));
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string src;
    int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) src += pieces[rng() % pieces.size()];
    check(src);
  }
  for (int iter = 0; iter < 3000; ++iter) {  // mutate a real template byte-wise
    std::string src = real[rng() % real.size()];
    for (int k = 0; k < 3; ++k) src[rng() % src.size()] = static_cast<char>(rng() % 256);
    check(src);
  }
}

}  // namespace
}  // namespace peregrine
