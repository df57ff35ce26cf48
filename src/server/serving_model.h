#pragma once
// The model a server serves: tokenizer, weights, chat template and the serving engine, plus the
// model-dependent half of request handling (RequestPreparer: tokenizing prompts, rendering chat,
// length checks, constraints).
#include <cstdint>
#include <functional>
#include <memory>
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
#include "server/request_preparer.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server {

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
  // The whole model when it runs in this process (a LocalRunner), for work the engine thread runs
  // on it besides serving (Engine::interleave: the web page's lab); null on a layout of processes.
  Model* local_model() { return local_ ? model_ : nullptr; }
  const ChatTemplate& chat_template() const { return preparer_.chat_template(); }
  // How this model's template renders tools and how its calls are read (chat/tool_calls.h).
  ToolCallFormat tool_format() const { return preparer_.tool_format(); }

  // Request preparation on this model's tokenizer, template and context (request_preparer.h):
  // length checks, chat rendering, tokenizing, constraints.
  RequestPreparer& preparer() { return preparer_; }
  const RequestPreparer& preparer() const { return preparer_; }
 private:
  std::string name_;
  Tokenizer tokenizer_;
  Model* model_;
  bool local_ = false;
  RequestPreparer preparer_;
  std::unique_ptr<Engine> engine_;  // last: its thread stops before the model goes
};

}  // namespace peregrine::server
