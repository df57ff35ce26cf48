// llama.cpp's tokenizer reference vectors (test-tokenizer-0): every input must encode to exactly
// the recorded ids with add_special = false and parse_special = false, and decode back.
#include <gtest/gtest.h>

#include "tokenizer_fixtures.h"

namespace peregrine {
namespace {

class ReferenceVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceVectors, EncodeMatchesLlamaCpp) {
  const std::string name = GetParam();
  const Tokenizer& tok = test::vocab_tokenizer(name);
  const auto vectors = test::reference_vectors(name);
  ASSERT_GT(vectors.size(), 30u);
  int failures = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    const auto got = tok.encode(vectors[i].text, /*add_special=*/false, /*parse_special=*/false);
    if (got != vectors[i].ids) {
      ++failures;
      ADD_FAILURE() << name << " vector " << i << " '" << vectors[i].text << "'\n  expected "
                    << test::ids_to_string(vectors[i].ids) << "\n  got      " << test::ids_to_string(got);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(ReferenceVectors, DecodeGivesTheInputBack) {
  // All four vocabularies are lossless for these inputs: SPM has byte fallback and decode strips
  // the space prefix it added; byte-level BPE can spell any byte.
  const std::string name = GetParam();
  const Tokenizer& tok = test::vocab_tokenizer(name);
  for (const auto& v : test::reference_vectors(name)) {
    EXPECT_EQ(tok.decode(v.ids), v.text) << name << ": '" << v.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, ReferenceVectors,
                         ::testing::Values("ggml-vocab-llama-spm", "ggml-vocab-phi-3",
                                           "ggml-vocab-llama-bpe", "ggml-vocab-gpt-2"),
                         [](const auto& info) {
                           std::string n = info.param.substr(std::string("ggml-vocab-").size());
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace peregrine
