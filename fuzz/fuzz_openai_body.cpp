// libFuzzer target for what the server does with a generation request's body before the engine
// sees it, with the server's own code: read_generation_request (parse_body, the completions or
// chat parser with tools and response_format, restore_schema_order), then
// RequestPreparer::prepare_generation (a forced tool call's grammar, the length checks, the chat
// template rendering with tools, tokenizing, the constraint compiled and started) on a real
// tokenizer and a published chat template, then the first token mask of the constraint.
//
// The first byte picks the setting, the rest is the body:
//   bits 0-1  the template: Qwen 2.5 (Hermes tools), Llama 3.1 (Llama 3 JSON tools), Mistral v3
//             (fallback tools block), the built-in ChatML fallback (fuzz/chat_templates/)
//   bit 2     the endpoint: /v1/chat/completions (0) or /v1/completions (1)
//   bit 3     special-token text in content parsed (serve --chat-parse-special) instead of text
//   bits 4-5  the tokenizer: Llama 3's byte-level BPE when both are set
//             (../shared/tokenizers/ggml-vocab-llama-bpe.gguf, when present), else the demo models'
//             SentencePiece vocabulary (models/demo-draft.gguf). A quarter of the inputs only: with
//             a constraint, its 128k-token vocabulary trie and first mask cost ~1.5 s per input.
//
// A bug is: any exception but ApiError, an ApiError whose status is not 4xx (the client's input
// is never the server's fault), a success whose prompts break the context limits or hold ids
// outside the vocabulary, a constraint asked for and not built (or the reverse), a sanitizer
// report, a crash, more than 10 s or 2 GiB for one input. A GrammarError from the first mask
// (the mask budget) is the engine's documented per-request failure, not a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "format/gguf.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/request_preparer.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace peregrine;
using server::ApiError;

constexpr int64_t kContextLength = 4096;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::filesystem::path source_dir() { return PEREGRINE_SOURCE_DIR; }

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) finding("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Tokenizer load_tokenizer(const std::filesystem::path& gguf) {
  const ModelFile file = read_gguf(gguf);
  return Tokenizer::from_metadata(file.meta, gguf.string());
}

struct Setting {
  std::vector<ChatTemplate> templates;
  std::vector<Tokenizer> tokenizers;
};

const Setting& setting() {
  static const Setting s = [] {
    Setting out;
    for (const char* name : {"qwen2.5.jinja", "llama3.1.jinja", "mistral-v3.jinja"}) {
      out.templates.push_back(ChatTemplate::parse(read_text(source_dir() / "fuzz" / "chat_templates" / name)));
    }
    out.templates.push_back(ChatTemplate::fallback());
    out.tokenizers.push_back(load_tokenizer(source_dir() / "models" / "demo-draft.gguf"));
    const auto bpe = source_dir() / ".." / "shared" / "tokenizers" / "ggml-vocab-llama-bpe.gguf";
    if (std::filesystem::exists(bpe)) out.tokenizers.push_back(load_tokenizer(bpe));
    return out;
  }();
  return s;
}

void check_prompts(const server::PreparedGeneration& p, const server::GenerationRequest& r, const Tokenizer& tok) {
  if (p.prompts.empty()) finding("a request prepared without prompts");
  if (r.endpoint == server::Endpoint::ChatCompletions && p.prompts.size() != 1) finding("a chat request with several prompts");
  for (const server::PreparedPrompt& prompt : p.prompts) {
    const auto n = static_cast<int64_t>(prompt.tokens.size());
    if (n == 0 || n >= kContextLength) finding("a prompt of " + std::to_string(n) + " tokens passed the checks");
    if (prompt.max_tokens < 0 || n + prompt.max_tokens > kContextLength) finding("max_tokens past the context passed");
    for (TokenId t : prompt.tokens) {
      if (t < 0 || t >= tok.n_vocab()) finding("token id " + std::to_string(t) + " outside the vocabulary passed");
    }
  }
  if ((r.constraint.kind != server::OutputConstraint::Kind::None) != (p.constraint != nullptr)) {
    finding("a constraint was asked for and not built, or the reverse");
  }
}

// The engine's first step with this constraint: the mask at its start.
void first_mask(TokenConstraint& constraint) {
  TokenSet allowed;
  try {
    constraint.allowed(constraint.start(), allowed);
  } catch (const GrammarError&) {
    // The mask budget: the engine ends this request with an error (its per-request boundary).
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Setting& s = setting();
  const uint8_t pick = data[0];
  const bool bpe = (pick & 0x30) == 0x30 && s.tokenizers.size() > 1;
  const Tokenizer& tokenizer = s.tokenizers[bpe ? 1 : 0];
  server::RequestPreparer preparer(tokenizer, s.templates[pick & 3], kContextLength);
  if ((pick & 8) != 0) preparer.set_content_special_tokens(ContentSpecialTokens::Parse);
  const auto endpoint = (pick & 4) != 0 ? server::Endpoint::Completions : server::Endpoint::ChatCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    server::GenerationRequest request = server::read_generation_request(body, endpoint);
    const server::PreparedGeneration prepared = preparer.prepare_generation(request);
    check_prompts(prepared, request, tokenizer);
    if (prepared.constraint) first_mask(*prepared.constraint);
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() > 499) finding("status " + std::to_string(e.status()) + ": " + e.what());
  }
  return 0;
}
