#include "server/request_preparer.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "engine/grammar_step.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "server/api_error.h"

namespace peregrine::server {
namespace {

// The fewest bytes the template writes around one message (role markers, separators), which the
// length check counts per message before rendering: a body of a quarter million empty messages is
// refused before the template runs over them. Measured once, by how much one more message of
// each role (empty) lengthens a small conversation; a role the template refuses is skipped, and
// 0 when it refuses them all.
size_t least_message_overhead(const ChatTemplate& chat_template, const Tokenizer& tokenizer) {
  auto rendered_bytes = [&](const std::vector<ChatMessage>& messages) {
    return render_chat_prompt(chat_template, tokenizer, messages, false, ContentSpecialTokens::AsText).text.size();
  };
  using Turns = std::vector<ChatMessage>;
  const ChatMessage user("user", ""), assistant("assistant", ""), system("system", "");
  const std::pair<Turns, Turns> one_more[] = {
      {Turns{user}, Turns{user, assistant}},
      {Turns{user, assistant}, Turns{user, assistant, user}},
      {Turns{user}, Turns{system, user}},
  };
  std::optional<size_t> least;
  for (const auto& [fewer, more] : one_more) {
    try {
      const size_t before = rendered_bytes(fewer);
      const size_t after = rendered_bytes(more);
      least = std::min(least.value_or(SIZE_MAX), after > before ? after - before : 0);
    } catch (const ChatTemplateError&) {
      // this role's turn is refused in this position: no measure from it
    }
  }
  return least.value_or(0);
}

}  // namespace

RequestPreparer::RequestPreparer(const Tokenizer& tokenizer, ChatTemplate chat_template, int64_t context_length)
    : tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      tool_format_(tool_call_format(chat_template_)),
      context_length_(context_length) {
  max_prompt_bytes_ = static_cast<size_t>(std::max<int64_t>(context_length_, 1)) * tokenizer_.max_piece_bytes();
  message_overhead_bytes_ = least_message_overhead(chat_template_, tokenizer_);
}

PreparedGeneration RequestPreparer::prepare_generation(GenerationRequest& request) {
  // tool_choice "required" or a named function: the answer is held to calls of the tools.
  if (request.tools.forced()) request.constraint = tool_constraint(tool_format_, request.tools);
  PreparedGeneration out;
  out.prompts = prepare(request);
  out.constraint = constraint(request.constraint);
  return out;
}

void RequestPreparer::check_text_fits(size_t bytes, const char* what, const std::string& param) const {
  if (bytes <= max_prompt_bytes_) return;
  throw invalid_request("This model's maximum context length is " + std::to_string(context_length_) + " tokens, and " +
                            what + " of " + std::to_string(bytes) + " bytes cannot fit in it (at most " +
                            std::to_string(max_prompt_bytes_) + " bytes of text can)",
                        param, "context_length_exceeded");
}

std::vector<TokenId> RequestPreparer::tokenize_prompt(const std::string& text, bool add_special) const {
  check_text_fits(text.size(), "a prompt", "prompt");
  return tokenizer_.encode(text, add_special, true);
}

ChatPrompt RequestPreparer::chat_prompt(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                     const ToolRequest& tools) const {
  // Before rendering: the content and the least the template adds around each message.
  size_t content_bytes = messages.size() * message_overhead_bytes_;
  for (const ChatMessage& m : messages) {
    content_bytes += m.content.size();
    for (const ChatToolCall& c : m.tool_calls) content_bytes += c.arguments.size();
  }
  check_text_fits(content_bytes, "messages", "messages");
  const nlohmann::ordered_json no_tools;
  const nlohmann::ordered_json& offered = tools.active() ? tools.tools : no_tools;
  ChatPrompt p;
  try {
    if (tool_format_ == ToolCallFormat::Fallback) {
      const std::vector<ChatMessage> folded = fallback_tool_messages(messages, offered);
      p = render_chat_prompt(chat_template_, tokenizer_, folded, add_generation_prompt, content_special_tokens_);
    } else {
      p = render_chat_prompt(chat_template_, tokenizer_, messages, add_generation_prompt, content_special_tokens_,
                             offered);
    }
  } catch (const ChatTemplateError& e) {
    // Includes the template's own raise_exception("...") for conversations it does not accept.
    throw invalid_request(std::string("chat template: ") + e.what(), "messages");
  }
  check_text_fits(p.text.size(), "the rendered conversation", "messages");
  return p;
}

PreparedPrompt RequestPreparer::finish_prompt(std::vector<TokenId> tokens, std::string text, const GenerationRequest& r) const {
  const int64_t ctx = context_length_;
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw invalid_request("the prompt is empty (and the model has no BOS token to start from)", "prompt");
  for (TokenId t : tokens) {
    if (t < 0 || t >= tokenizer_.n_vocab()) {
      throw invalid_request("token id " + std::to_string(t) + " is outside the vocabulary (" +
                                std::to_string(tokenizer_.n_vocab()) + " tokens)",
                            "prompt");
    }
  }
  const std::string& max_param = r.max_tokens_param;
  if (n >= ctx) {
    throw invalid_request("This model's maximum context length is " + std::to_string(ctx) + " tokens, but the prompt has " +
                              std::to_string(n) + " tokens, leaving no room for the completion",
                          r.endpoint == Endpoint::Completions ? "prompt" : "messages", "context_length_exceeded");
  }
  PreparedPrompt p;
  p.max_tokens = r.max_tokens.value_or(ctx - n);
  if (n + p.max_tokens > ctx) {
    throw invalid_request("This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you requested " +
                              std::to_string(n + p.max_tokens) + " tokens (" + std::to_string(n) + " in the prompt, " +
                              std::to_string(p.max_tokens) + " for the completion)",
                          max_param, "context_length_exceeded");
  }
  p.tokens = std::move(tokens);
  p.text = std::move(text);
  return p;
}

std::vector<PreparedPrompt> RequestPreparer::prepare(const GenerationRequest& r) const {
  for (const auto& [id, bias] : r.sampling.logit_bias) {
    if (id >= tokenizer_.n_vocab()) {
      throw invalid_request("'logit_bias' names token id " + std::to_string(id) + ", outside the vocabulary (" +
                                std::to_string(tokenizer_.n_vocab()) + " tokens)",
                            "logit_bias");
    }
  }
  std::vector<PreparedPrompt> out;
  if (r.endpoint == Endpoint::ChatCompletions) {
    ChatPrompt chat = chat_prompt(r.messages, r.add_generation_prompt, r.tools);
    // Templates normally write the BOS text themselves; the fallback (ChatML) does not.
    std::vector<TokenId>& ids = chat.tokens;
    if (tokenizer_.add_bos() && tokenizer_.bos() >= 0 && (ids.empty() || ids.front() != tokenizer_.bos())) {
      ids.insert(ids.begin(), tokenizer_.bos());
    }
    out.push_back(finish_prompt(std::move(ids), std::move(chat.text), r));
    return out;
  }
  // Every text is checked against the context before any is tokenized.
  for (const PromptSpec& spec : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&spec)) check_text_fits(text->size(), "a prompt", "prompt");
  }
  for (const PromptSpec& spec : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&spec)) {
      out.push_back(finish_prompt(tokenize_prompt(*text, true), *text, r));
    } else {
      const auto& ids = std::get<std::vector<int32_t>>(spec);
      for (int32_t t : ids) {
        if (t >= tokenizer_.n_vocab()) {
          throw invalid_request("token id " + std::to_string(t) + " is outside the vocabulary (" +
                                    std::to_string(tokenizer_.n_vocab()) + " tokens)",
                                "prompt");
        }
      }
      // Token prompts are taken as given: no BOS is added.
      out.push_back(finish_prompt(ids, tokenizer_.decode(ids), r));
    }
  }
  return out;
}

namespace {

// The GBNF text of a constraint (a schema compiles to GBNF; errors name the field).
std::string constraint_gbnf(const OutputConstraint& spec) {
  switch (spec.kind) {
    case OutputConstraint::Kind::JsonObject:
      return json_object_gbnf();
    case OutputConstraint::Kind::JsonSchema:
      return json_schema_to_gbnf(spec.schema);
    case OutputConstraint::Kind::Grammar:
      return spec.grammar;
    case OutputConstraint::Kind::None:
      break;
  }
  return "";
}

}  // namespace

OutputConstraint RequestPreparer::tool_constraint(ToolCallFormat format, const ToolRequest& tools) {
  OutputConstraint c;
  if (!tools.forced()) return c;
  try {
    c.grammar = tool_call_gbnf(format, tools.callable(), tools.parallel);
  } catch (const GrammarError& e) {
    throw invalid_request(e.what(), "tools");
  }
  c.kind = OutputConstraint::Kind::Grammar;
  c.param = "tools";
  return c;
}

std::shared_ptr<TokenConstraint> RequestPreparer::constraint(const OutputConstraint& spec) {
  if (spec.kind == OutputConstraint::Kind::None) return nullptr;
  std::string text;
  try {
    text = constraint_gbnf(spec);
    {
      std::lock_guard lock(constraints_mu_);
      for (auto it = constraints_.begin(); it != constraints_.end(); ++it) {
        if (it->first != text) continue;
        constraints_.splice(constraints_.begin(), constraints_, it);
        return it->second;
      }
      for (const auto& [refused_text, why] : refused_) {
        if (refused_text == text) throw GrammarError(why);
      }
      if (!vocab_trie_) vocab_trie_ = make_vocab_trie(tokenizer_);
    }
    auto grammar = std::make_shared<const Grammar>(compile_gbnf(text));
    // Builds the start state once, under its budget: too ambiguous or costly to start is refused
    // here, on the preparing thread, and every request with this grammar copies it.
    auto built = std::make_shared<TokenConstraint>(grammar, vocab_trie_);
    std::lock_guard lock(constraints_mu_);
    constraints_.emplace_front(text, built);
    if (constraints_.size() > kMaxCachedConstraints) constraints_.pop_back();
    return built;
  } catch (const GrammarError& e) {
    if (!text.empty()) {  // compiled and refused: the same text sent again is refused at once
      std::lock_guard lock(constraints_mu_);
      if (std::none_of(refused_.begin(), refused_.end(), [&](const auto& r) { return r.first == text; })) {
        refused_.emplace_front(text, e.what());
        if (refused_.size() > kMaxCachedConstraints) refused_.pop_back();
      }
    }
    throw invalid_request(e.what(), spec.param);
  }
}

}  // namespace peregrine::server
