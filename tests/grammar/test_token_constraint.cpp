// The token mask against its plain reference: feeding every token's bytes to a copy of the
// matcher. Random vocabularies hold tokens that span several terminals, end inside a UTF-8
// character, or carry a leading space; random walks visit many grammar states.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"

namespace peregrine {
namespace {

std::vector<std::string> random_vocab(std::mt19937& rng, size_t n) {
  const std::vector<std::string> pieces = {"{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"",
                                           ":",
                                           ",",
                                           " ",
                                           "\n",
                                           "\\",
                                           "a",
                                           "b",
                                           "e",
                                           "n",
                                           "u",
                                           "l",
                                           "t",
                                           "r",
                                           "s",
                                           "x",
                                           "1",
                                           "0",
                                           "9",
                                           "-",
                                           ".",
                                           "+",
                                           "*",
                                           "(",
                                           ")",
                                           "/",
                                           "\xC3\xA9",
                                           "\xE2\x82\xAC",
                                           "\xF0\x9F\x98\x80",
                                           "\xC3",
                                           "\xA9",
                                           "\x82",
                                           "true",
                                           "false",
                                           "null",
                                           "name",
                                           "\":",
                                           "\",",
                                           "\"}",
                                           "},",
                                           "\\n",
                                           "\\u00",
                                           "  ",
                                           "12",
                                           "\"a\""};
  std::vector<std::string> vocab;
  vocab.push_back("");  // a control token (no bytes)
  for (const std::string& p : pieces) vocab.push_back(p);
  while (vocab.size() < n) {
    std::string t;
    const size_t parts = 1 + rng() % 4;
    for (size_t k = 0; k < parts; ++k) t += pieces[rng() % pieces.size()];
    vocab.push_back(t);
  }
  vocab.push_back("");   // another control token, last
  vocab.push_back("a");  // a duplicate of an earlier token's bytes
  return vocab;
}

std::vector<int32_t> reference_allowed(const TokenConstraint& tc, const GrammarMatcher& m, bool drop_space) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tc.trie().n_vocab(); ++id) {
    GrammarMatcher probe = m;
    if (tc.accept_token(probe, id, drop_space)) out.push_back(id);
  }
  return out;
}

std::vector<int32_t> ids_of(const TokenSet& s) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < s.n_vocab(); ++id) {
    if (s.contains(id)) out.push_back(id);
  }
  return out;
}

// Random walks through the grammar: at every step the mask equals the reference, mask_logits
// bans exactly the rest, and a random allowed token is taken.
void check_walks(const std::string& gbnf, uint32_t seed, int walks, int steps) {
  std::mt19937 rng(seed);
  auto trie = std::make_shared<const VocabTrie>(random_vocab(rng, 400));
  auto grammar = std::make_shared<const Grammar>(compile_gbnf(gbnf));
  TokenConstraint tc(grammar, trie);
  int states = 0;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m = tc.start();
    for (int step = 0; step < steps; ++step) {
      const bool drop_space = step == 0 && w % 2 == 1;
      TokenSet allowed;
      tc.allowed(m, allowed, drop_space);
      const std::vector<int32_t> got = ids_of(allowed);
      ASSERT_EQ(got, reference_allowed(tc, m, drop_space)) << "walk " << w << " step " << step;
      std::vector<float> logits(static_cast<size_t>(trie->n_vocab()), 0.5f);
      tc.mask_logits(m, logits, drop_space);
      for (int32_t id = 0; id < trie->n_vocab(); ++id) {
        ASSERT_EQ(std::isinf(logits[static_cast<size_t>(id)]), !allowed.contains(id)) << id;
      }
      ++states;
      if (got.empty()) break;
      ASSERT_TRUE(tc.accept_token(m, got[rng() % got.size()], drop_space));
    }
  }
  EXPECT_GT(states, walks);
  EXPECT_GT(tc.cached_tops(), 0u);
}

TEST(TokenConstraint, MatchesReferenceOnJsonGrammar) { check_walks(json_object_gbnf(), 1, 30, 40); }

TEST(TokenConstraint, MatchesReferenceOnSchemaGrammar) {
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 4}, "n": {"type": "integer"},
                   "tags": {"type": "array", "items": {"enum": ["a", "b\u00e9", 1, null]}, "maxItems": 3},
                   "ok": {"type": "boolean"}},
    "required": ["name"], "additionalProperties": false})");
  check_walks(json_schema_to_gbnf(schema), 2, 30, 40);
}

TEST(TokenConstraint, MatchesReferenceOnArithmeticAndCsv) {
  check_walks(R"gbnf(root ::= expr
expr ::= term ([-+*/] term)*
term ::= [0-9]+ | "(" expr ")" | "-" term)gbnf",
              3, 30, 30);
  check_walks(R"(root ::= (field ("," field)* "\n"){1,3}
field ::= [a-z0-9]* | "\"" ([^"] | "\"\"")* "\"")",
              4, 30, 30);
}

TEST(TokenConstraint, MatchesReferenceOnUnicodeAndRightRecursion) {
  check_walks(R"(root ::= "[" item "]"
item ::= [^\x00-\x7F]+ | [a-z] item | "\\" [nu] item?)",
              5, 30, 20);
}

TEST(TokenConstraint, ControlTokensNeverAllowedAndAnswersCached) {
  std::mt19937 rng(9);
  auto trie = std::make_shared<const VocabTrie>(random_vocab(rng, 200));
  TokenConstraint tc(std::make_shared<const Grammar>(compile_gbnf("root ::= [a-z]*")), trie);
  GrammarMatcher m = tc.start();
  TokenSet allowed;
  tc.allowed(m, allowed);
  for (int32_t id : trie->empty_tokens()) EXPECT_FALSE(allowed.contains(id));
  EXPECT_GT(allowed.count(), 0u);
  const size_t tops = tc.cached_tops();
  const size_t states = tc.cached_states();
  EXPECT_EQ(states, 1u);
  tc.allowed(m, allowed);
  EXPECT_EQ(tc.cached_tops(), tops);
  EXPECT_EQ(tc.cached_states(), states);
  // The text is complete and nothing more is possible: no token, the caller ends generation.
  auto done = std::make_shared<const Grammar>(compile_gbnf("root ::= \"x\""));
  TokenConstraint tc2(done, trie);
  GrammarMatcher m2 = tc2.start();
  ASSERT_TRUE(m2.accept_bytes("x"));
  tc2.allowed(m2, allowed);
  EXPECT_EQ(allowed.count(), 0u);
  EXPECT_TRUE(m2.is_accepting());
  EXPECT_FALSE(m2.can_continue());
}

TEST(VocabTrie, RanksGroupSubtrees) {
  VocabTrie t({"b", "", "ab", "a", "abc", "b", "\xC3\xA9"});
  EXPECT_EQ(t.n_ranked(), 6u);
  ASSERT_EQ(t.empty_tokens().size(), 1u);
  EXPECT_EQ(t.empty_tokens()[0], 1);
  // Sorted by bytes, ties by id: a(3) ab(2) abc(4) b(0) b(5) é(6).
  const std::vector<int32_t> expected = {3, 2, 4, 0, 5, 6};
  for (uint32_t r = 0; r < t.n_ranked(); ++r) EXPECT_EQ(t.id_at(r), expected[r]);
  const RankInterval a = t.starting_with('a');
  EXPECT_EQ(a.begin, 0u);
  EXPECT_EQ(a.end, 3u);
  const RankInterval b = t.starting_with('b');
  EXPECT_EQ(b.begin, 3u);
  EXPECT_EQ(b.end, 5u);
  EXPECT_EQ(t.max_depth(), 3u);
}

}  // namespace
}  // namespace peregrine
