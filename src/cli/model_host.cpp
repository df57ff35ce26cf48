#include "cli/model_host.h"

namespace peregrine::cli {

ModelHost::ModelHost(const DistFlags& flags, const std::string& command, const std::function<ModelFile()>& open,
                     std::shared_ptr<ExecutionContext> context) {
  auto session = flags.start(command);
  if (!session->distributed()) {
    whole_ = std::make_unique<Model>(open(), std::move(context));
    local_ = std::make_unique<LocalRunner>(*whole_);
    return;
  }
  session_ = std::move(session);
  session_->load(open, std::move(context));
}

std::string ModelHost::describe() const {
  if (!session_) return "one process";
  return std::to_string(session_->layout().ranks()) + " processes (" + session_->layout().describe() + ")";
}

}  // namespace peregrine::cli
