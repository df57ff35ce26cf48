#pragma once
// Loads the real vocabularies under ../shared/tokenizers once per test binary (the 128k-token
// llama-bpe file is the slow one) and reads llama.cpp's reference vectors.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::test {

inline const ModelFile& vocab_file(const std::string& name) {
  static std::map<std::string, ModelFile> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    it = cache.emplace(name, read_gguf(shared_file("tokenizers/" + name + ".gguf"))).first;
  }
  return it->second;
}

inline const Tokenizer& vocab_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    it = cache.emplace(name, Tokenizer::from_metadata(vocab_file(name).meta, name + ".gguf")).first;
  }
  return it->second;
}

inline std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct ReferenceVector {
  std::string text;
  std::vector<TokenId> ids;
};

// Splits NAME.gguf.inp exactly as llama.cpp's test-tokenizer-0 does: on "\n__ggml_vocab_test__\n"
// (so the newline before and after each separator line belongs to the separator), stopping at
// the end of the file; NAME.gguf.out holds one line of space-separated ids per input.
inline std::vector<ReferenceVector> reference_vectors(const std::string& name) {
  const std::string inp = read_text_file(shared_file("tokenizers/" + name + ".gguf.inp"));
  const std::string out = read_text_file(shared_file("tokenizers/" + name + ".gguf.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<TokenId>> outputs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<TokenId> v;
    for (long id; ids >> id;) v.push_back(static_cast<TokenId>(id));
    outputs.push_back(std::move(v));
  }
  EXPECT_EQ(inputs.size(), outputs.size()) << name << ": .inp and .out disagree on the number of tests";
  std::vector<ReferenceVector> vectors;
  for (size_t i = 0; i < std::min(inputs.size(), outputs.size()); ++i) {
    vectors.push_back({inputs[i], outputs[i]});
  }
  return vectors;
}

inline std::string ids_to_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace peregrine::test
