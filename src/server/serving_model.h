#pragma once
// The model a server serves: tokenizer, weights, chat template and the serving engine, plus the
// model-dependent half of request handling (tokenizing prompts, rendering chat, length checks).
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "engine/engine.h"
#include "format/model_file.h"
#include "grammar/token_constraint.h"
#include "model/model.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server {

struct PreparedPrompt {
  std::vector<TokenId> tokens;
  std::string text;       // the prompt as text (echo); token prompts are decoded
  int64_t max_tokens = 0;  // the request's, or the rest of the context
};

class ServingModel {
 public:
  // The engine on `runner` (the whole model in this process, or one spread over several
  // processes, rank 0's part being `model`; cli/model_host.h builds both); both outlive this
  // object. `engine_config` sizes the engine for the model's shape; `chat_template_source`
  // overrides the model's tokenizer.chat_template. A model template that does not parse is
  // reported on stderr and replaced by the fallback. Throws FormatError or UsageError (also
  // ChatTemplateError for a bad override).
  ServingModel(Model& model, ModelRunner& runner, std::string name,
               const std::function<EngineConfig(const Model&)>& engine_config,
               const std::optional<std::string>& chat_template_source);
  ServingModel(const ServingModel&) = delete;
  ServingModel& operator=(const ServingModel&) = delete;

  const std::string& name() const { return name_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  int64_t context_length() const { return model_->config().context_length; }
  Engine& engine() { return *engine_; }
  const Model& model() const { return *model_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  // How this model's template renders tools and how its calls are read (chat/tool_calls.h).
  ToolCallFormat tool_format() const { return tool_format_; }

  // How special-token text inside chat message content is tokenized (default: as text).
  void set_content_special_tokens(ContentSpecialTokens mode) { content_special_tokens_ = mode; }

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

  // The request's constrained decoding (response_format / grammar), compiled and built on this
  // model's vocabulary; null for free text. The last kMaxCachedConstraints are kept by their text,
  // so a schema sent again reuses its cached masks. Throws ApiError 400 naming the field for a
  // grammar that does not parse, a schema keyword that is not supported, or a grammar too
  // ambiguous or costly to start (the last kMaxCachedConstraints refused texts are kept too, so a
  // refused grammar sent again costs no compiling). Safe from any thread.
  std::shared_ptr<TokenConstraint> constraint(const OutputConstraint& spec);
  static constexpr size_t kMaxCachedConstraints = 16;

 private:
  PreparedPrompt finish_prompt(std::vector<TokenId> tokens, std::string text, const GenerationRequest& r) const;

  // Throws ApiError 400 (context_length_exceeded, naming `param`) when `bytes` of text cannot fit.
  void check_text_fits(size_t bytes, const char* what, const std::string& param) const;

  std::string name_;
  Tokenizer tokenizer_;
  ChatTemplate chat_template_;
  ToolCallFormat tool_format_ = ToolCallFormat::Fallback;
  Model* model_;
  size_t max_prompt_bytes_ = 0;
  size_t message_overhead_bytes_ = 0;  // the least text the template adds around a message
  ContentSpecialTokens content_special_tokens_ = ContentSpecialTokens::AsText;
  std::mutex constraints_mu_;
  std::shared_ptr<const VocabTrie> vocab_trie_;                                      // built on first use
  std::list<std::pair<std::string, std::shared_ptr<TokenConstraint>>> constraints_;  // most recent first
  std::list<std::pair<std::string, std::string>> refused_;  // grammar texts refused, and why; most recent first
  std::unique_ptr<Engine> engine_;  // last: its thread stops before the model goes
};

}  // namespace peregrine::server
