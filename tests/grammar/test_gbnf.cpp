// GBNF: parsing, compiling, matching, and clear errors for bad grammars.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <regex>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace peregrine {
namespace {

std::shared_ptr<const Grammar> grammar(const std::string& text) {
  return std::make_shared<const Grammar>(compile_gbnf(text));
}

// Whole-text match: every byte accepted and the grammar complete.
bool matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.is_accepting();
}
bool matches(const std::string& g, const std::string& text) { return matches(grammar(g), text); }
bool valid_prefix(const std::string& g, const std::string& text) {
  return GrammarMatcher(grammar(g)).accept_bytes(text);
}

std::string error_of(const std::string& text) {
  try {
    compile_gbnf(text);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gbnf, LiteralsAndEscapes) {
  EXPECT_TRUE(matches(R"(root ::= "a\n\x41\u00e9\"\\")", "a\nA\xC3\xA9\"\\"));
  EXPECT_TRUE(matches(R"(root ::= "héllo" "")", "h\xC3\xA9llo"));
  EXPECT_FALSE(matches(R"(root ::= "abc")", "ab"));
  EXPECT_TRUE(valid_prefix(R"(root ::= "abc")", "ab"));
  EXPECT_FALSE(valid_prefix(R"(root ::= "abc")", "abd"));
}

TEST(Gbnf, CharacterClasses) {
  const std::string ident = "root ::= [a-zA-Z_] [a-zA-Z0-9_]*";
  EXPECT_TRUE(matches(ident, "_x9"));
  EXPECT_FALSE(matches(ident, "9x"));
  const std::string not_quote = R"(root ::= "\"" [^"\\]* "\"")";
  EXPECT_TRUE(matches(not_quote, "\"caf\xC3\xA9 \xF0\x9F\x98\x80\""));
  EXPECT_FALSE(matches(not_quote, "\"a\"b\""));
  EXPECT_FALSE(valid_prefix(not_quote,
                            "\"\xC3"
                            "A"));                          // a broken UTF-8 sequence is not a character
  EXPECT_FALSE(valid_prefix(not_quote, "\"\xED\xA0\x80"));  // an encoded surrogate is not either
  EXPECT_TRUE(matches("root ::= [α-ω]+", "\xCE\xB1\xCF\x89"));
  EXPECT_FALSE(matches("root ::= [α-ω]+", "a"));
  EXPECT_TRUE(matches("root ::= . . .", "a\xE2\x82\xAC\n"));
  EXPECT_TRUE(matches(R"(root ::= [\]\-\\]+)", "]-\\"));
  EXPECT_TRUE(matches(R"(root ::= [\x00-\x1f]+)", std::string("\x01\n", 2)));
}

// Grammar text is read strictly as UTF-8, so a grammar only ever writes UTF-8: fuzz_gbnf found a
// literal holding an encoded surrogate (ED A0 80) taken as U+D800 and written back out as those
// bytes, and overlong forms (C0 80) or lead bytes past F4 decoded to some other character.
TEST(Gbnf, GrammarTextMustBeUtf8) {
  for (const char* bad : {"\xED\xA0\x80", "\xC0\x80", "\xE0\x80\x80", "\xF0\x80\x80\x80", "\xF4\x90\x80\x80",
                          "\xF8\x88\x80\x80", "\xFF", "\x80", "\xC3", "\xC3" "A"}) {
    EXPECT_EQ(error_of(std::string("root ::= \"a") + bad + "\""), "grammar: line 1, column 12: invalid UTF-8 in the grammar")
        << bad;
    EXPECT_NE(error_of(std::string("root ::= [") + bad + "]").find("invalid UTF-8 in the grammar"), std::string::npos)
        << bad;
  }
  EXPECT_TRUE(matches("root ::= \"\xF4\x8F\xBF\xBF\xEF\xBF\xBF\xC2\x80\"", "\xF4\x8F\xBF\xBF\xEF\xBF\xBF\xC2\x80"));
  // A pattern is read the same way (JSON text from a client is UTF-8 already; the compiler's own
  // callers may pass anything).
  EXPECT_THROW(regex_to_gbnf("a\xED\xA0\x80"), GrammarError);
  EXPECT_THROW(regex_to_gbnf("[\xC0\x80]"), GrammarError);
}

TEST(Gbnf, Repetitions) {
  const std::string g = R"(root ::= "a"{2} "b"{1,3} "c"{2,} "d"? "e"* "f"+ "g"{,2})";
  EXPECT_TRUE(matches(g, "aabccf"));
  EXPECT_TRUE(matches(g, "aabbbcccccdeeeffgg"));
  EXPECT_FALSE(matches(g, "abccf"));
  EXPECT_FALSE(matches(g, "aabbbbccf"));
  EXPECT_FALSE(matches(g, "aabcf"));
  EXPECT_FALSE(matches(g, "aabccfggg"));
  EXPECT_TRUE(matches(R"(root ::= ("ab" | "c"){3})", "abcab"));
  EXPECT_TRUE(matches(R"(root ::= ""* "x")", "x"));  // repeating the empty string
}

TEST(Gbnf, RulesGroupsCommentsAndLines) {
  const std::string g = R"(# a comment
root ::= item ("," item)*   # trailing comment
item ::=
    "x"
  | "y" (
      "1" |
      "2"
    )
)";
  EXPECT_TRUE(matches(g, "x,y1,y2"));
  EXPECT_FALSE(matches(g, "x,y3"));
  EXPECT_TRUE(matches("root ::= a\na ::= \"q\" | \"r\"\n", "r"));
  EXPECT_TRUE(matches("root ::= a-b_c\na-b_c ::= \"z\"\r\n", "z"));
}

const char* kArithmetic = R"gbnf(
root   ::= expr
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
ws     ::= " "?
)gbnf";

TEST(Gbnf, Arithmetic) {
  for (const char* ok : {"1", "1 + 2", "(1+2)*3.5", "-(4 / 2) - -3", "((((7))))"})
    EXPECT_TRUE(matches(kArithmetic, ok)) << ok;
  for (const char* bad : {"1 +", "(1", "1..2", "+1", "1  + 2", "()"}) EXPECT_FALSE(matches(kArithmetic, bad)) << bad;
}

const char* kCsv = R"(
root   ::= header row{1,3}
header ::= field ("," field)* "\n"
row    ::= field ("," field)* "\n"
field  ::= [a-z0-9]+ | "\"" ([^"] | "\"\"")* "\""
)";

TEST(Gbnf, Csv) {
  EXPECT_TRUE(matches(kCsv, "a,b\n1,2\n"));
  EXPECT_TRUE(matches(kCsv, "name,q\n\"x, \"\"y\"\"\",3\nz,4\n"));
  EXPECT_FALSE(matches(kCsv, "a,b\n"));
  EXPECT_FALSE(matches(kCsv, "a,b\n1,2\n1\n2\n3\n"));
  EXPECT_FALSE(matches(kCsv, "a,b\n\"unterminated\n"));
}

TEST(Gbnf, ErrorsSayWhereAndWhat) {
  EXPECT_EQ(error_of("root = \"a\""), "grammar: line 1, column 6: expected '::=' after the rule name 'root'");
  EXPECT_EQ(error_of("root ::= \"abc\nx ::= \"y\""), "grammar: line 1, column 10: unterminated string literal");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "grammar: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= x\n\n  x ::= y"), "grammar: line 3, column 9: rule 'y' is not defined");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""), "grammar: line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("start ::= \"a\""), "grammar: there is no rule named 'root' to start from");
  EXPECT_EQ(error_of("root ::= (\"a\" | \"b\""), "grammar: line 1, column 20: missing ')' at the end of the grammar");
  EXPECT_EQ(error_of("root ::= \"a\")"), "grammar: line 1, column 13: unbalanced ')'");
  EXPECT_EQ(error_of("root ::= [a-"), "grammar: line 1, column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= [z-a]"), "grammar: line 1, column 13: character range with its end before its start");
  EXPECT_EQ(error_of("root ::= \"a\"{3,2}"), "grammar: line 1, column 13: repetition {m,n} with n < m");
  EXPECT_EQ(error_of("root ::= <[42]>"), "grammar: line 1, column 10: token references (<...>) are not supported");
  EXPECT_EQ(error_of("root ::= \"a\" | * \"b\""),
            "grammar: line 1, column 16: expected a literal, a character class, a rule name or '(' but found '*'");
  EXPECT_EQ(error_of(""), "grammar: line 1, column 1: the grammar has no rules");
  EXPECT_EQ(error_of("root ::= \"\\uD800\""), "grammar: line 1, column 11: escape is not a Unicode scalar value");
}

TEST(Gbnf, LeftRecursionIsRefused) {
  EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""),
            "grammar: rule 'root' can reach itself without consuming input (left recursion, or a repetition of "
            "something that can be empty): root -> root");
  EXPECT_NE(error_of("root ::= a\na ::= b \"x\"\nb ::= \"\" | a").find("a -> b -> a"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"?)*").find("can reach itself without consuming input"), std::string::npos);
  EXPECT_NE(error_of("root ::= x root \"y\" | \"z\"\nx ::= \"\"").find("root -> root"), std::string::npos);
  EXPECT_TRUE(matches("root ::= x \"y\" root | \"z\"\nx ::= \"\"", "yyz"));  // nullable, then a byte: fine
  // Right recursion is fine.
  EXPECT_TRUE(matches("root ::= \"a\" root | \"b\"", "aaab"));
}

TEST(Gbnf, SizeLimits) {
  std::string big = "root ::=";
  for (int i = 0; i < 11; ++i) big += " \"a\"{100000}";
  EXPECT_NE(error_of(big).find("elements after expanding repetitions"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{0,100000}").find("rules after expanding repetitions"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{1000000}").find("repetition bound above"), std::string::npos);
  std::string deep = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')');
  EXPECT_NE(error_of(deep).find("nested more than"), std::string::npos);
  // Many alternatives alive at once: refused with an error, never unbounded work.
  std::string wide = "root ::= x0";
  for (int i = 1; i < 1500; ++i) wide += " | x" + std::to_string(i);
  for (int i = 0; i < 1500; ++i) wide += "\nx" + std::to_string(i) + " ::= \"a\" [0-9]";
  EXPECT_THROW(GrammarMatcher{grammar(wide)}, GrammarError);
}

// Issue 27: expansion work is bounded per operation, not per stack. 4 096 alternatives that each
// expand within the old per-stack bound took ~268 M steps (13 s) to start; 600 stacks that each
// expand through a long run of empty rules cost the same per byte.
TEST(Gbnf, ExpansionWorkIsBoundedPerOperation) {
  std::string bomb = "root ::= a";
  for (int i = 1; i < 4096; ++i) bomb += " | a";
  bomb += "\na ::= b{32000} \"x\"\nb ::= \"\"\n";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    GrammarMatcher m(grammar(bomb));
    ADD_FAILURE() << "started";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("too costly to expand"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // Per byte: 400 stacks take "x", then each runs through 1 000 empty rules before its terminal.
  std::string wide = "root ::= \"x\" k0";
  for (int i = 1; i < 400; ++i) wide += " | \"x\" k" + std::to_string(i);
  for (int i = 0; i < 400; ++i) wide += "\nk" + std::to_string(i) + " ::= e{1000} \"" + std::to_string(i) + "\"";
  wide += "\ne ::= \"\"\n";
  GrammarMatcher m(grammar(wide));
  EXPECT_THROW(m.accept_byte('x'), GrammarError);
  // A start that stays within budget is kept as built: copies are the same state.
  GrammarMatcher start(grammar("root ::= a | a | a\na ::= b{1000} \"x\"\nb ::= \"\"\n"));
  GrammarMatcher copy = start;
  EXPECT_TRUE(copy.accept_byte('x'));
  EXPECT_TRUE(copy.is_accepting());
}

// Regular grammars against std::regex (ECMAScript) on random strings: the same verdicts.
TEST(Gbnf, AgreesWithRegexOnRandomStrings) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {R"(root ::= [a-c]{2,4} ("x" | "yz")*)", "[a-c]{2,4}(x|yz)*"},
      {R"(root ::= ("a" | "ab") ("c" | "bc")? "z"?)", "(a|ab)(c|bc)?z?"},
      {R"(root ::= ([^a] "b"?)+ "a")", "([^a]b?)+a"},
      {R"(root ::= x{1,3} | "c"+
x ::= "ab" | [xyz]+)",
       "(ab|[xyz]+){1,3}|c+"},
  };
  const std::string alphabet = "abcxyz";
  std::mt19937 rng(11);
  for (const auto& [text, pattern] : pairs) {
    const auto g = grammar(text);
    const std::regex re(pattern);
    int positives = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string s;
      const size_t len = rng() % 9;
      for (size_t k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      const bool expected = std::regex_match(s, re);
      positives += expected ? 1 : 0;
      ASSERT_EQ(matches(g, s), expected) << text << " on '" << s << "'";
    }
    EXPECT_GT(positives, 10) << text;  // the comparison saw both answers
  }
}

TEST(Gbnf, MatcherStateAndCompletion) {
  GrammarMatcher m(grammar(R"(root ::= "ab" "c"?)"));
  EXPECT_FALSE(m.is_accepting());
  EXPECT_TRUE(m.can_continue());
  EXPECT_FALSE(m.accept_byte('x'));
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_TRUE(m.can_continue());
  EXPECT_FALSE(m.accept_bytes("cc"));  // all or nothing
  EXPECT_TRUE(m.accept_byte('c'));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_FALSE(m.can_continue());
}

TEST(Gbnf, TailCallsKeepStacksShallow) {
  GrammarMatcher m(grammar(R"(root ::= ("x" | "y")* "." | item "!"
item ::= "z" item | "z")"));
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(m.accept_byte(i % 2 ? 'x' : 'y'));
  for (const ParseStack& s : m.stacks()) EXPECT_LE(s.size(), 3u);
}

}  // namespace
}  // namespace peregrine
