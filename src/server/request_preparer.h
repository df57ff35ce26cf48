#pragma once
// The model-dependent half of request handling that needs only the model's tokenizer, its chat
// template and its context length, not its weights or engine: length checks, chat rendering (with
// tools), tokenizing prompts, and compiling constrained decoding's grammars (cached). ServingModel
// holds one; fuzz/fuzz_openai_body drives one directly, with the server's own code.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "grammar/token_constraint.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server {

struct PreparedPrompt {
  std::vector<TokenId> tokens;
  std::string text;       // the prompt as text (echo); token prompts are decoded
  int64_t max_tokens = 0;  // the request's, or the rest of the context
};

// What a generation request becomes before the engine sees it.
struct PreparedGeneration {
  std::vector<PreparedPrompt> prompts;
  std::shared_ptr<TokenConstraint> constraint;  // null for free text
};

class RequestPreparer {
 public:
  // `tokenizer` outlives this object.
  RequestPreparer(const Tokenizer& tokenizer, ChatTemplate chat_template, int64_t context_length);
  RequestPreparer(const RequestPreparer&) = delete;
  RequestPreparer& operator=(const RequestPreparer&) = delete;

  const ChatTemplate& chat_template() const { return chat_template_; }
  // How this template renders tools and how its calls are read (chat/tool_calls.h).
  ToolCallFormat tool_format() const { return tool_format_; }
  int64_t context_length() const { return context_length_; }

  // How special-token text inside chat message content is tokenized (default: as text).
  void set_content_special_tokens(ContentSpecialTokens mode) { content_special_tokens_ = mode; }

  // What /v1/completions and /v1/chat/completions do with a parsed request before it is queued:
  // a forced tool call's constraint (tool_choice "required" or named) replaces request.constraint,
  // then prepare(), then constraint(). Throws ApiError (400) as those do.
  PreparedGeneration prepare_generation(GenerationRequest& request);

  // The engine prompts of a request (completions: one per prompt; chat: the rendered
  // conversation). Throws ApiError 400 for an empty prompt, a token id outside the vocabulary
  // (prompt or logit_bias), a template error, or prompt + max_tokens beyond the context. Text
  // longer than the context could hold is refused before it is tokenized (max_prompt_bytes).
  std::vector<PreparedPrompt> prepare(const GenerationRequest& request) const;
  // The chat prompt: rendered and tokenized (special tokens only from the template's text), after
  // checking that the messages' text plus the template's least per-message text can fit. With
  // `tools` active they are rendered by the template (Hermes, Llama3Json) or in the fallback
  // system block; earlier calls and tool results are rendered natively or folded into text the
  // same way, whether tools are active or not.
  ChatPrompt chat_prompt(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const ToolRequest& tools = {}) const;
  // A forced tool call's constraint (tool_choice "required" or named): the grammar of this
  // model's call format over the callable tools' schemas.
  static OutputConstraint tool_constraint(ToolCallFormat format, const ToolRequest& tools);
  // Text -> ids: string prompts get BOS when the model wants it; special-token text is parsed.
  // Throws ApiError 400 (context_length_exceeded) beyond max_prompt_bytes().
  std::vector<TokenId> tokenize_prompt(const std::string& text, bool add_special) const;
  // The most bytes of text that can fit the context: no token stands for more bytes than the
  // longest vocabulary string, so longer text cannot be within context_length() tokens.
  size_t max_prompt_bytes() const { return max_prompt_bytes_; }

  // The request's constrained decoding (response_format / grammar), compiled and built on the
  // vocabulary; null for free text. The last kMaxCachedConstraints are kept by their text, so a
  // schema sent again reuses its cached masks. Throws ApiError 400 naming the field for a grammar
  // that does not parse, a schema keyword that is not supported, or a grammar too ambiguous or
  // costly to start (the last kMaxCachedConstraints refused texts are kept too, so a refused
  // grammar sent again costs no compiling). Safe from any thread.
  std::shared_ptr<TokenConstraint> constraint(const OutputConstraint& spec);
  static constexpr size_t kMaxCachedConstraints = 16;

 private:
  PreparedPrompt finish_prompt(std::vector<TokenId> tokens, std::string text, const GenerationRequest& r) const;

  // Throws ApiError 400 (context_length_exceeded, naming `param`) when `bytes` of text cannot fit.
  void check_text_fits(size_t bytes, const char* what, const std::string& param) const;

  const Tokenizer& tokenizer_;
  ChatTemplate chat_template_;
  ToolCallFormat tool_format_ = ToolCallFormat::Fallback;
  int64_t context_length_ = 0;
  size_t max_prompt_bytes_ = 0;
  size_t message_overhead_bytes_ = 0;  // the least text the template adds around a message
  ContentSpecialTokens content_special_tokens_ = ContentSpecialTokens::AsText;
  std::mutex constraints_mu_;
  std::shared_ptr<const VocabTrie> vocab_trie_;                                      // built on first use
  std::list<std::pair<std::string, std::shared_ptr<TokenConstraint>>> constraints_;  // most recent first
  std::list<std::pair<std::string, std::string>> refused_;  // grammar texts refused, and why; most recent first
};

}  // namespace peregrine::server
