#include "cli/backend_flags.h"

#include "cli/dist_flags.h"

namespace peregrine::cli {

void BackendFlags::add_to(ArgParser& p) {
  if (threads == 0) threads = default_threads();
  p.option("--backend", &backend, "NAME", "where the model computes: " + backend_names());
  p.option("-t,--threads", &threads, "N", "compute threads (physical cores unless given)", 1, 1024);
  activations.add_to(p);
}

BackendOptions BackendFlags::options() const { return {backend, static_cast<int>(threads), activations.value()}; }

std::shared_ptr<ExecutionContext> BackendFlags::make_context() const { return peregrine::make_context(options()); }

}  // namespace peregrine::cli
