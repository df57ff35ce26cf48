#pragma once
// Where a command's model runs: wholly in this process, or spread over the processes mpirun
// started (--tp/--pp, dist/). The commands that drive an engine (run, bench, serve, bench-serve)
// open their model through it and take its runner, so each has one code path for both.
#include <functional>
#include <memory>
#include <string>

#include "backend/execution_context.h"
#include "cli/dist_flags.h"
#include "dist/session.h"
#include "engine/model_runner.h"
#include "format/model_file.h"
#include "model/model.h"

namespace peregrine::cli {

class ModelHost {
 public:
  // Checks the layout against the launch, then every process opens the model (`open`) and binds
  // its part on `context`. Throws UsageError / FormatError on rank 0 (dist::QuietExit on the
  // others for errors rank 0 reports).
  ModelHost(const DistFlags& flags, const std::string& command, const std::function<ModelFile()>& open,
            std::shared_ptr<ExecutionContext> context);

  // A rank other than 0: it only runs steps (serve_steps) and returns its exit code.
  bool worker() const { return session_ && session_->is_worker(); }
  int serve_steps() { return session_->serve_steps(); }

  bool distributed() const { return session_ != nullptr; }
  // Rank 0: the model (a partial model on a layout; its config is the whole model's) and the
  // runner an EngineCore steps.
  Model& model() { return whole_ ? *whole_ : session_->model(); }
  ModelRunner& runner() { return whole_ ? static_cast<ModelRunner&>(*local_) : session_->runner(); }
  dist::DistSession* session() { return session_.get(); }
  // A description for logs: "whole model" or the layout.
  std::string describe() const;

 private:
  std::unique_ptr<dist::DistSession> session_;
  std::unique_ptr<Model> whole_;
  std::unique_ptr<LocalRunner> local_;
};

}  // namespace peregrine::cli
