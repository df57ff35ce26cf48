// Constrained decoding in the engine (Request::grammar) on stories260K, a real model that knows
// nothing of JSON: every sampled output is a sentence of its grammar, the tokens do not depend on
// what shares the batch or on speculation (drafts are masked too), and the ends (complete grammar,
// max_tokens, stop strings, a vocabulary that cannot go on) are what grammar_step.h promises.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "engine/grammar_step.h"
#include "engine_test_util.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::ReplayProposer;
using test::run_alone;
using test::run_to_completion;
using test::stories;

std::shared_ptr<const VocabTrie> stories_trie() {
  static const auto trie = make_vocab_trie(stories().tokenizer);
  return trie;
}

std::shared_ptr<TokenConstraint> constraint(Grammar g) {
  return std::make_shared<TokenConstraint>(std::make_shared<const Grammar>(std::move(g)), stories_trie());
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", null]},
    "friends": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}},
  "required": ["name", "mood"], "additionalProperties": false})";

Request constrained(const std::shared_ptr<TokenConstraint>& c, uint64_t seed, int64_t max_tokens = 200) {
  Request r;
  r.prompt = stories().tokenizer.encode("Once upon a time, there was", true, false);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.grammar = c;
  return r;
}

bool complete_sentence(const std::shared_ptr<TokenConstraint>& c, const std::string& text) {
  GrammarMatcher m = c->start();
  return m.accept_bytes(text) && m.is_accepting();
}

TEST(GrammarDecoding, SampledOutputsAreSentencesOfTheSchema) {
  auto& s = stories();
  auto c = constraint(compile_json_schema(nlohmann::ordered_json::parse(kSchema)));
  EngineConfig cfg;
  cfg.kv_blocks = 256;
  EngineCore core(s.model, &s.tokenizer, cfg);
  Recorder rec;
  std::vector<RequestId> ids;
  for (uint64_t seed = 0; seed < 12; ++seed) ids.push_back(core.add_request(constrained(c, seed)));
  run_to_completion(core, rec);
  int stopped = 0;
  for (RequestId id : ids) {
    const Outcome& o = rec.outcomes[id];
    ASSERT_NE(o.finish, RequestFinish::Error) << o.error;
    if (o.finish != RequestFinish::Stop) {
      GrammarMatcher m = c->start();
      EXPECT_TRUE(m.accept_bytes(o.text)) << "a cut output is still a valid prefix: " << o.text;
      continue;
    }
    ++stopped;
    EXPECT_TRUE(complete_sentence(c, o.text)) << o.text;
    const auto v = nlohmann::json::parse(o.text);
    EXPECT_TRUE(v["name"].is_string());
    EXPECT_TRUE(v["mood"].is_null() || v["mood"] == "happy" || v["mood"] == "sad");
  }
  EXPECT_GE(stopped, 10);
  EXPECT_GT(core.stats().grammar_rows, 0);
}

TEST(GrammarDecoding, SameTokensAloneInABatchAndWithMaskedDrafts) {
  auto& s = stories();
  auto c = constraint(compile_json_schema(nlohmann::ordered_json::parse(kSchema)));
  std::vector<Request> requests;
  for (uint64_t seed = 20; seed < 26; ++seed) requests.push_back(constrained(c, seed, 80));
  requests[2].sampling.temperature = 0;  // greedy among the allowed tokens
  Request free_text = constrained(nullptr, 99, 40);
  free_text.grammar = nullptr;
  std::vector<Outcome> alone;
  for (const Request& r : requests) alone.push_back(run_alone(s.model, &s.tokenizer, r, 64));
  // Proposals replay the plain runs with every fourth token wrong (mostly refused by the grammar):
  // masked verification must give the same tokens.
  auto proposer = std::make_shared<ReplayProposer>(4);
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<TokenId> full = requests[i].prompt;
    full.insert(full.end(), alone[i].tokens.begin(), alone[i].tokens.end());
    proposer->known.push_back(full);
  }
  for (bool speculate : {false, true}) {
    EngineConfig cfg;
    cfg.kv_blocks = 256;
    if (speculate) cfg.proposer = proposer;
    EngineCore core(s.model, &s.tokenizer, cfg);
    Recorder rec;
    std::vector<RequestId> ids;
    core.add_request(free_text);
    for (const Request& r : requests) ids.push_back(core.add_request(r));
    run_to_completion(core, rec);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(rec.outcomes[ids[i]].tokens, alone[i].tokens) << "request " << i << " speculate " << speculate;
      EXPECT_EQ(rec.outcomes[ids[i]].text, alone[i].text);
      EXPECT_EQ(rec.outcomes[ids[i]].finish, alone[i].finish);
    }
    if (speculate) {
      const EngineStats st = core.stats();
      EXPECT_GT(st.accepted_tokens, 0);
      EXPECT_EQ(st.kv_blocks_used, 0);
    }
  }
}

TEST(GrammarDecoding, EndsWhenCompleteOrAtMaxTokensOrStopString) {
  auto& s = stories();
  // Nothing can follow "yes" or "no": the request ends with stop, no end token needed.
  Outcome done = run_alone(s.model, &s.tokenizer, constrained(constraint(compile_gbnf(R"(root ::= "yes" | "no")")), 1));
  EXPECT_EQ(done.finish, RequestFinish::Stop);
  EXPECT_TRUE(done.text == "yes" || done.text == "no") << done.text;
  // Complete but it could go on, end tokens ignored: max_tokens ends it, still a valid sentence.
  Request more = constrained(constraint(compile_gbnf(R"(root ::= [a-z]+)")), 2, 6);
  more.ignore_eos = true;
  Outcome cut = run_alone(s.model, &s.tokenizer, more);
  EXPECT_EQ(cut.finish, RequestFinish::Length);
  EXPECT_EQ(cut.tokens.size(), 6u);
  EXPECT_TRUE(complete_sentence(more.grammar, cut.text)) << cut.text;
  // A stop string inside the constrained text ends it there (the text is then a prefix).
  Request stop = constrained(constraint(compile_gbnf(R"(root ::= "ab" [a-z]* "!")")), 3, 30);
  stop.stop = {"b"};
  Outcome stopped = run_alone(s.model, &s.tokenizer, stop);
  EXPECT_EQ(stopped.finish, RequestFinish::Stop);
  EXPECT_EQ(stopped.text, "a");
}

TEST(GrammarDecoding, FirstTokenOfATextLosesItsLeadingSpace) {
  auto& s = stories();
  ASSERT_TRUE(s.tokenizer.add_space_prefix());
  // A prompt of BOS alone: the output starts the text, and the detokenizer drops the first
  // token's leading space; the grammar must judge the text the client sees.
  for (uint64_t seed = 0; seed < 6; ++seed) {
    Request r =
        constrained(constraint(compile_gbnf(R"(root ::= "Once" " " [a-z]+ "." | "The" [ a-z]+ ".")")), seed, 30);
    r.prompt = {s.tokenizer.bos()};
    r.sampling.temperature = 0.8f;
    const Outcome o = run_alone(s.model, &s.tokenizer, r);
    ASSERT_NE(o.finish, RequestFinish::Error) << o.error;
    if (o.finish == RequestFinish::Stop) {
      EXPECT_TRUE(complete_sentence(r.grammar, o.text)) << o.text;
    }
    EXPECT_TRUE(o.text.rfind("Once", 0) == 0 || o.text.rfind("The", 0) == 0) << o.text;
  }
}

TEST(GrammarDecoding, BadConstraintsEndWithAnErrorNotACrash) {
  auto& s = stories();
  // Built on another vocabulary.
  auto other = std::make_shared<TokenConstraint>(std::make_shared<const Grammar>(compile_gbnf("root ::= \"a\"")),
                                                 std::make_shared<const VocabTrie>(std::vector<std::string>{"a", "b"}));
  Outcome wrong = run_alone(s.model, &s.tokenizer, constrained(other, 1));
  EXPECT_EQ(wrong.finish, RequestFinish::Error);
  EXPECT_NE(wrong.error.find("vocabulary of 2 tokens"), std::string::npos) << wrong.error;
  // A vocabulary (of the right size) that cannot spell what the grammar needs.
  auto unspellable = std::make_shared<TokenConstraint>(
      std::make_shared<const Grammar>(compile_gbnf("root ::= \"z\" \"a\"")),
      std::make_shared<const VocabTrie>(std::vector<std::string>(static_cast<size_t>(s.tokenizer.n_vocab()), "z")));
  Outcome stuck = run_alone(s.model, &s.tokenizer, constrained(unspellable, 1));
  EXPECT_EQ(stuck.finish, RequestFinish::Error);
  EXPECT_EQ(stuck.error, "grammar: no token of the vocabulary continues the text here");
  // Too ambiguous to start: refused when the constraint is built (its start state is built once,
  // there), so no request ever gets it.
  std::string wide = "root ::= x0";
  for (int i = 1; i < 1500; ++i) wide += " | x" + std::to_string(i);
  for (int i = 0; i < 1500; ++i) wide += "\nx" + std::to_string(i) + " ::= \"a\" [0-9]";
  try {
    constraint(compile_gbnf(wide));
    ADD_FAILURE() << "built";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

// Issue 27: a grammar that starts within bounds (520 stacks) but doubles after its first byte
// (1 040 > 1 024) threw out of the engine's step and ended the process. It ends its own request,
// as the client's error, and the request beside it in the same steps goes on to its end.
TEST(GrammarDecoding, AGrammarFailingMidGenerationEndsOnlyItsRequest) {
  auto& s = stories();
  std::string g = "root ::= \"{\" sp \"k0\"";
  for (int i = 1; i < 520; ++i) g += " | \"{\" sp \"k" + std::to_string(i) + "\"";
  g += "\nsp ::= \" \" | \"\"\n";
  EngineConfig cfg;
  cfg.kv_blocks = 256;
  EngineCore core(s.model, &s.tokenizer, cfg);
  const RequestId bad = core.add_request(constrained(constraint(compile_gbnf(g)), 1, 16));
  Request plain = constrained(nullptr, 2, 24);
  plain.ignore_eos = true;
  const RequestId good = core.add_request(plain);
  std::map<RequestId, RequestEvent> last;
  for (int i = 0; i < 1000 && core.has_work(); ++i) {
    for (const RequestEvent& ev : core.step()) last[ev.id] = ev;
  }
  EXPECT_EQ(last[bad].finish, RequestFinish::Error);
  EXPECT_TRUE(last[bad].client_error);
  EXPECT_NE(last[bad].error.find("too ambiguous"), std::string::npos) << last[bad].error;
  EXPECT_EQ(last[good].finish, RequestFinish::Length) << last[good].error;
  EXPECT_FALSE(core.has_work());
}

}  // namespace
}  // namespace peregrine
