#include "server/serving_model.h"

#include <cstdio>
#include <utility>

namespace peregrine::server {
namespace {

ChatTemplate choose_template(const Metadata& meta, const std::optional<std::string>& override_source) {
  if (override_source) return ChatTemplate::parse(*override_source);
  if (auto source = meta.get_string_opt("tokenizer.chat_template")) {
    try {
      return ChatTemplate::parse(*source);
    } catch (const ChatTemplateError& e) {
      std::fprintf(stderr, "[serve] warning: the model's chat template does not parse (%s); using the ChatML fallback\n",
                   e.what());
    }
  }
  return ChatTemplate::fallback();
}

}  // namespace

ServingModel::ServingModel(Model& model, ModelRunner& runner, std::string name,
                           const std::function<EngineConfig(const Model&)>& engine_config,
                           const std::optional<std::string>& chat_template_source)
    : name_(std::move(name)),
      tokenizer_(Tokenizer::from_metadata(model.file().meta, model.file().path)),
      model_(&model),
      local_(dynamic_cast<LocalRunner*>(&runner) != nullptr),
      preparer_(tokenizer_, choose_template(model.file().meta, chat_template_source), model.config().context_length) {
  engine_ = std::make_unique<Engine>(runner, &tokenizer_, engine_config(model));
}

}  // namespace peregrine::server
