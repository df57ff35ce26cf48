// The speculative proposers on the demo models: the Medusa heads give the argmax the torch
// reference recorded (models/reference_outputs.json), the draft-model proposer proposes the draft
// model's own greedy continuation, the n-gram lookup finds the most recent longest match, and
// files that do not fit are refused with the reason.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu_context.h"
#include "common/test_context.h"
#include "common/test_paths.h"
#include "engine/draft_heads_proposer.h"
#include "engine/draft_proposer.h"
#include "engine/ngram_proposer.h"
#include "format/gguf.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::filesystem::path models_dir() { return test::source_dir() / "models"; }

nlohmann::json heads_reference() {
  std::ifstream in(models_dir() / "reference_outputs.json");
  if (!in) throw std::runtime_error("cannot open models/reference_outputs.json");
  return nlohmann::json::parse(in)["heads"]["demo-heads.gguf"];
}

Request greedy_request(std::vector<TokenId> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.repetition_penalty = 1.0f;
  return r;
}

TEST(DraftHeadsProposer, ProposesTheTorchReferenceArgmaxOfEveryHead) {
  Model target(read_gguf(models_dir() / "demo-target.gguf"), test::shared_test_context());
  DraftHeadsProposer heads(read_gguf(models_dir() / "demo-heads.gguf"), target);
  ASSERT_EQ(heads.n_heads(), 4);
  const auto ref = heads_reference();
  ASSERT_FALSE(ref["cases"].empty());
  for (const auto& c : ref["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<TokenId>>();
    // The target's hidden state at the prompt's last token (the state that predicts t + 1).
    KvCache kv = target.make_kv_cache(KvType::F32, 16, 16);
    ASSERT_TRUE(kv.pool().reserve(0, static_cast<int64_t>(prompt.size())));
    Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
    std::vector<float> logits, hidden;
    target.forward(b, kv, logits);
    const TokenId next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    // The sequence as the engine holds it after committing that next token.
    Sequence seq(1, greedy_request(prompt), 0);
    seq.tokens.push_back(next);
    target.copy_logits_hidden(hidden);
    heads.on_commit(seq, hidden);
    Sequence* seqs[] = {&seq};
    const int64_t max_tokens[] = {4};
    heads.propose(seqs, max_tokens);
    EXPECT_EQ(seq.draft, c["head_argmax"].get<std::vector<TokenId>>()) << c["prompt"];
    ASSERT_EQ(seq.draft_q.size(), seq.draft.size());
    EXPECT_TRUE(seq.draft_q[0].greedy);
  }
  EXPECT_EQ(heads.passes(), static_cast<int64_t>(ref["cases"].size()));
}

TEST(DraftHeadsProposer, RefusesFilesThatAreNotHeadsForThisTarget) {
  Model target(read_gguf(models_dir() / "demo-target.gguf"), test::shared_test_context());
  EXPECT_THROW(DraftHeadsProposer(read_gguf(models_dir() / "demo-draft.gguf"), target), FormatError);
  Model draft(read_gguf(models_dir() / "demo-draft.gguf"),
              test::shared_test_context());  // dim 96: heads for 256 do not fit
  try {
    DraftHeadsProposer(read_gguf(models_dir() / "demo-heads.gguf"), draft);
    ADD_FAILURE() << "heads for another model accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("dim 256"), std::string::npos) << e.what();
  }
}

TEST(DraftModelProposer, ProposesTheDraftModelsGreedyContinuation) {
  Model target(read_gguf(models_dir() / "demo-target.gguf"), test::shared_test_context());
  const ModelFile draft_file = read_gguf(models_dir() / "demo-draft-distilled.gguf");
  check_same_vocabulary(target.file(), draft_file);
  Model reference(draft_file, target.shared_context());
  DraftModelProposer proposer(Model(draft_file, target.shared_context()), 256);
  const std::vector<TokenId> prompt = {1, 590, 368, 261, 259, 955};
  // The draft's own greedy continuation, one token per forward pass.
  std::vector<TokenId> expected;
  {
    KvCache kv = reference.make_kv_cache(KvType::F16, 16, 16);
    ASSERT_TRUE(kv.pool().reserve(0, 32));
    std::vector<TokenId> all = prompt;
    std::vector<float> logits;
    Batch b;
    for (size_t i = 0; i < all.size(); ++i) b.add(all[i], static_cast<int32_t>(i), 0, i + 1 == all.size());
    for (int step = 0; step < 6; ++step) {
      reference.forward(b, kv, logits);
      const TokenId t = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      expected.push_back(t);
      b.clear();
      b.add(t, static_cast<int32_t>(all.size()), 0, true);
      all.push_back(t);
    }
  }
  Sequence seq(3, greedy_request(prompt), 0);
  Sequence* seqs[] = {&seq};
  const int64_t four[] = {4};
  proposer.propose(seqs, four);
  EXPECT_EQ(seq.draft, std::vector<TokenId>(expected.begin(), expected.begin() + 4));
  // Two of them accepted and the target's own token after: the next proposal continues from
  // there, reusing the cache for the shared prefix.
  seq.tokens.insert(seq.tokens.end(), expected.begin(), expected.begin() + 3);
  seq.clear_draft();
  const int64_t passes = proposer.passes();
  const int64_t two[] = {2};
  proposer.propose(seqs, two);
  EXPECT_EQ(seq.draft, std::vector<TokenId>(expected.begin() + 3, expected.begin() + 5));
  EXPECT_EQ(proposer.passes() - passes, 2);
  proposer.on_finish(seq);
}

TEST(NgramLookup, ProposesWhatFollowedTheMostRecentLongestMatch) {
  //                               0  1  2  3  4  5  6  7  8  9 10 11
  const std::vector<TokenId> seq = {5, 6, 7, 8, 9, 6, 7, 1, 2, 5, 6, 7};
  // Suffix "5 6 7" occurred at 0: what followed was 8 9 6 7.
  EXPECT_EQ(ngram_lookup(seq, 1, 4, 4), (std::vector<TokenId>{8, 9, 6, 7}));
  // Only trigrams and shorter allowed, at most 2 tokens.
  EXPECT_EQ(ngram_lookup(seq, 1, 3, 2), (std::vector<TokenId>{8, 9}));
  // Bigram "6 7": the most recent earlier one is at 5, followed by 1 2.
  EXPECT_EQ(ngram_lookup(seq, 1, 2, 3), (std::vector<TokenId>{1, 2, 5}));
  // No earlier occurrence of the last token: nothing to propose.
  EXPECT_TRUE(ngram_lookup(std::vector<TokenId>{1, 2, 3, 4}, 1, 4, 4).empty());
  // A run repeating itself is continued (the match may overlap the suffix).
  EXPECT_EQ(ngram_lookup(std::vector<TokenId>{3, 3, 3, 3}, 1, 2, 3), (std::vector<TokenId>{3}));
  EXPECT_THROW(NgramProposer(0, 3), UsageError);
  EXPECT_THROW(NgramProposer(3, 2), UsageError);
  EXPECT_THROW(NgramProposer(1, 17), UsageError);
}

}  // namespace
}  // namespace peregrine
