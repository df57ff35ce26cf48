// The Jinja subset, piece by piece: expressions, operators, filters, tests, methods, control
// flow, scoping and whitespace control.
#include <gtest/gtest.h>

#include "jinja_test_util.h"

namespace peregrine {
namespace {

using test::jinja_error;
using test::jinja_render;

TEST(JinjaExpr, Literals) {
  EXPECT_EQ(jinja_render("{{ 'a\\tb\\n\\'q\\' \"d\" \\u00e9' }}"), "a\tb\n'q' \"d\" \xc3\xa9");
  EXPECT_EQ(jinja_render(R"({{ "x\\y" }})"), "x\\y");
  EXPECT_EQ(jinja_render("{{ 42 }} {{ -7 }} {{ 1.5 }} {{ 2.0 }} {{ 1e3 }}"), "42 -7 1.5 2.0 1000.0");
  EXPECT_EQ(jinja_render("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}"),
            "True False None True None");
  EXPECT_EQ(jinja_render("{{ [1, 'a', none, [true]] }}"), "[1, 'a', None, [True]]");
  EXPECT_EQ(jinja_render("{{ {'k': 1, \"q\": 'v'} }}"), "{'k': 1, 'q': 'v'}");
  EXPECT_EQ(jinja_render("{{ 'ab' 'cd' }}"), "abcd");
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(jinja_render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}"),
            "7 9 3 -4 2");
  EXPECT_EQ(jinja_render("{{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }}"), "3.5 2.0 1024 2.5");
  EXPECT_EQ(jinja_render("{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 ~ 'x' ~ none }}"),
            "ab ababab [1, 2] 1xNone");
  EXPECT_EQ(jinja_render("{{ 'a' ~ undefined_var ~ 'b' }}"), "ab");
  EXPECT_NE(jinja_error("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"),
            std::string::npos);
  EXPECT_NE(jinja_error("{{ 1 // 0 }}").find("division or modulo by zero"), std::string::npos);
  EXPECT_NE(jinja_error("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
}

TEST(JinjaExpr, ComparisonAndLogic) {
  EXPECT_EQ(jinja_render("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ [1,2] == [1,2] }}"),
            "True True True True True");
  EXPECT_EQ(jinja_render("{{ 'ell' in 'hello' }} {{ 3 not in [1, 2] }} {{ 'role' in messages[0] }}"),
            "True True True");
  EXPECT_EQ(jinja_render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }} {{ none or [] }}"), "x y True []");
  EXPECT_EQ(jinja_render("{{ not 1 == 2 }}"), "True");  // not binds looser than ==
  EXPECT_EQ(jinja_render("{{ 'yes' if 1 > 0 else 'no' }} [{{ 'yes' if false }}]"), "yes []");
  EXPECT_NE(jinja_error("{{ 1 < 'a' }}").find("'<' not supported"), std::string::npos);
}

TEST(JinjaExpr, AccessAndSlices) {
  EXPECT_EQ(jinja_render("{{ messages[1]['content'] }} {{ messages[1].role }} {{ messages[-1].role }}"),
            "Hi user user");
  EXPECT_EQ(jinja_render("{{ messages[1:] | length }} {{ messages[:1][0].role }} {{ messages[5] is defined }}"),
            "1 system False");
  EXPECT_EQ(jinja_render("{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[-1] }} {{ [1,2,3,4][::2] }}"),
            "el olleh o [1, 3]");
  EXPECT_EQ(jinja_render("{{ 'h\xc3\xa9llo'[1] }} {{ 'h\xc3\xa9llo'[:-1] }}"), "\xc3\xa9 h\xc3\xa9ll");
  // Undefined propagates through attributes and subscripts and prints as nothing.
  EXPECT_EQ(jinja_render("[{{ nothing }}][{{ nothing.attr.deeper }}][{{ nothing['k'][0] }}]"), "[][][]");
  EXPECT_EQ(jinja_render("{{ messages[0].missing is defined }} {{ nothing is undefined }}"), "False True");
}

TEST(JinjaExpr, Filters) {
  EXPECT_EQ(jinja_render("[{{ messages[0].content | trim }}] {{ 'Ab' | upper }} {{ 'Ab' | lower }}"),
            "[Be brief.] AB ab");
  EXPECT_EQ(jinja_render("{{ messages | length }} {{ 'h\xc3\xa9' | length }} {{ {'a': 1} | length }}"),
            "2 2 1");
  EXPECT_EQ(jinja_render("{{ nothing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }}"),
            "d  d");
  EXPECT_EQ(jinja_render("{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ [1, 2] | join(', ') }}"),
            "1 3 1, 2");
  EXPECT_EQ(jinja_render("{{ 'a-b-c' | replace('-', '+') }} {{ 'hello world' | capitalize }} "
                         "{{ 'hello world' | title }}"),
            "a+b+c Hello world Hello World");
  EXPECT_EQ(jinja_render("{{ 42 | string }} {{ '17' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }}"),
            "42 18 0 3");
  EXPECT_EQ(jinja_render("{{ messages | map(attribute='role') | join(',') }}"), "system,user");
  EXPECT_EQ(jinja_render("{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
                         "{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | first }}"),
            "1 system");
  EXPECT_EQ(jinja_render("{{ [1, none, 2] | select('none') | list }} {{ ['a', 'b'] | reject('equalto', 'a') | list }}"),
            "[None] ['b']");
  EXPECT_EQ(jinja_render("{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_NE(jinja_error("{{ 1 | nosuchfilter }}").find("unknown filter 'nosuchfilter'"), std::string::npos);
}

TEST(JinjaExpr, ToJson) {
  EXPECT_EQ(jinja_render("{{ {'a': [1, 2.5, true, none], 'b': 'q\"\\n\xc3\xa9'} | tojson }}"),
            "{\"a\": [1, 2.5, true, null], \"b\": \"q\\\"\\n\xc3\xa9\"}");
  EXPECT_EQ(jinja_render("{{ {'a': [1], 'b': {}} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(jinja_render("{{ messages[1] | tojson }}"), "{\"role\": \"user\", \"content\": \"Hi\"}");
}

TEST(JinjaExpr, Tests) {
  EXPECT_EQ(jinja_render("{{ 'x' is string }} {{ 1 is string }} {{ none is none }} {{ 1 is not none }}"),
            "True False True True");
  EXPECT_EQ(jinja_render("{{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}"),
            "True True True True");
  EXPECT_EQ(jinja_render("{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ 3 is odd }} "
                         "{{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto('a') }}"),
            "True True True True True True True");
  EXPECT_EQ(jinja_render("{{ not nothing is defined }}"), "True");  // not (nothing is defined)
  EXPECT_NE(jinja_error("{{ 1 is fancy }}").find("unknown test 'fancy'"), std::string::npos);
}

TEST(JinjaExpr, Methods) {
  EXPECT_EQ(jinja_render("[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}]"),
            "[a][a  ][  a][a]");
  EXPECT_EQ(jinja_render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }}"),
            "True True True");
  EXPECT_EQ(jinja_render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
  EXPECT_EQ(jinja_render("{{ 'user'.title() }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ 'aXa'.replace('a', 'b') }}"),
            "User AB ab bXb");
  EXPECT_EQ(jinja_render("{% for k, v in messages[1].items() %}{{ k }}:{{ v }} {% endfor %}"), "role:user content:Hi ");
  EXPECT_EQ(jinja_render("{{ messages[1].get('role') }} {{ messages[1].get('x') }} {{ messages[1].get('x', 7) }} "
                         "{{ messages[1].keys() | list }}"),
            "user None 7 ['role', 'content']");
  EXPECT_NE(jinja_error("{{ 'a'.frobnicate() }}").find("'str' object has no method 'frobnicate'"),
            std::string::npos);
}

TEST(JinjaStmt, IfElifElse) {
  const char* t = "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}";
  EXPECT_EQ(jinja_render(t), "one two many ");
}

TEST(JinjaStmt, ForLoopVariables) {
  EXPECT_EQ(jinja_render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                         "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ x }} {% endfor %}"),
            "103TrueFalse3a 212FalseFalse3b 321FalseTrue3c ");
  EXPECT_EQ(jinja_render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(jinja_render("{% for x in range(10) if x is odd %}{{ x }}{% endfor %}"), "13579");
  EXPECT_EQ(jinja_render("{% for x in range(2, 8, 3) %}{{ x }}{% endfor %}{% for x in range(3, 0, -1) %}{{ x }}{% endfor %}"),
            "25321");
  EXPECT_EQ(jinja_render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(jinja_render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}"), "3,7,");
  EXPECT_EQ(jinja_render("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}"), "xy");
  EXPECT_EQ(jinja_render("{% for m in messages %}{% for c in m.role %}{{ loop.index }}{% endfor %}|{{ loop.index }} {% endfor %}"),
            "123456|1 1234|2 ");
}

TEST(JinjaStmt, SetScopingAndNamespace) {
  // A plain set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(jinja_render("{% set x = 1 %}{% for i in range(3) %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}"),
            "11 11 11 1");
  EXPECT_EQ(jinja_render("{% set ns = namespace(count=0, seen=false) %}{% for m in messages %}"
                         "{% set ns.count = ns.count + 1 %}{% if m.role == 'system' %}{% set ns.seen = true %}{% endif %}"
                         "{% endfor %}{{ ns.count }} {{ ns.seen }}"),
            "2 True");
  EXPECT_EQ(jinja_render("{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}"), "in-if");
  EXPECT_EQ(jinja_render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(jinja_render("{% set block %}x{{ 1 + 1 }}y{% endset %}[{{ block }}]"), "[x2y]");
  EXPECT_EQ(jinja_render("{% set messages = messages[1:] %}{{ messages | length }}"), "1");
  EXPECT_NE(jinja_error("{% set x = 1 %}{% set x.a = 2 %}").find("not a namespace"), std::string::npos);
}

TEST(JinjaStmt, Globals) {
  EXPECT_EQ(jinja_render("{{ range(3) | list }} {{ dict(a=1)['a'] }}"), "[0, 1, 2] 1");
  chat::RenderOptions opts;
  opts.now = 1721952000;  // 2024-07-26 00:00 UTC; local time zone may shift the day by one
  std::string date = jinja_render("{{ strftime_now('%Y') }}", test::sample_context(), opts);
  EXPECT_EQ(date, "2024");
  EXPECT_EQ(jinja_error("{{ raise_exception('custom message: ' ~ messages | length) }}"), "custom message: 2");
  EXPECT_EQ(jinja_render("{{ strftime_now is defined }} {{ raise_exception is undefined }} {{ nosuch is defined }}"),
            "True False False");
  EXPECT_NE(jinja_error("{{ nosuchfunction() }}").find("unknown function 'nosuchfunction'"), std::string::npos);
}

TEST(JinjaWhitespace, DashControl) {
  EXPECT_EQ(jinja_render("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(jinja_render("a \n{%- if true -%}\n  b  \n{%- endif -%}\n c"), "abc");
  EXPECT_EQ(jinja_render("a {# comment #} b {#- trimmed -#} c"), "a  bc");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  // trim_blocks: the newline right after a block tag goes; lstrip_blocks: indentation before a
  // block tag goes. Neither applies to {{ }}.
  EXPECT_EQ(jinja_render("{% if true %}\nyes\n{% endif %}\nend"), "yes\nend");
  EXPECT_EQ(jinja_render("  {% if true %}\n    x\n  {% endif %}\n"), "    x\n");
  EXPECT_EQ(jinja_render("{{ 'v' }}\nz"), "v\nz");
  EXPECT_EQ(jinja_render("a  {% if true %}b{% endif %}"), "a  b");  // not at line start: kept
  EXPECT_EQ(jinja_render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(jinja_render("{# c #}\nnext"), "next");
}

TEST(JinjaSyntax, ErrorsNameLineAndColumn) {
  EXPECT_EQ(jinja_error("{% if x %}"), "chat template:1:11: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(jinja_error("ab\n  {{ x + }}"), "chat template:2:10: unexpected '}}' in expression");
  EXPECT_EQ(jinja_error("{{ 'abc }}"), "chat template:1:4: unterminated string literal");
  EXPECT_EQ(jinja_error("x\n{{ a"), "chat template:2:1: unterminated tag (missing '}}')");
  EXPECT_EQ(jinja_error("{# never closed"), "chat template:1:1: unterminated comment (missing '#}')");
  EXPECT_EQ(jinja_error("{% frobnicate %}"), "chat template:1:4: unknown tag 'frobnicate'");
  EXPECT_EQ(jinja_error("{% macro m() %}{% endmacro %}"),
            "chat template:1:4: 'macro' blocks are not supported in chat templates");
  EXPECT_EQ(jinja_error("{% for x in y %}{% endif %}"),
            "chat template:1:20: unknown tag 'endif'");
  EXPECT_EQ(jinja_error("{{ a $ b }}"), "chat template:1:6: unexpected character '$' in tag");
  EXPECT_EQ(jinja_error("{{ f(a=1, 2) }}"), "chat template:1:11: positional argument after keyword argument");
  // Runtime errors carry the position too.
  EXPECT_EQ(jinja_error("\n\n   {{ 1 + 'a' }}"),
            "chat template:3:9: unsupported operand types for +: 'int' and 'str'");
}

TEST(JinjaSyntax, ChatTemplateParseThrowsTypedError) {
  EXPECT_THROW(ChatTemplate::parse("{% if %}"), ChatTemplateError);
  EXPECT_THROW(ChatTemplate::parse("{% if %}"), UsageError);  // so generic handlers catch it
  EXPECT_EQ(ChatTemplate::parse("hi {{ bos_token }}").source(), "hi {{ bos_token }}");
}

}  // namespace
}  // namespace peregrine
