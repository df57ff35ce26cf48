#pragma once
// Every execution context the commands and the server can run on, in one table, and the one
// factory they build their context through (cli/backend_flags.h turns --backend NAME, -t and
// --activations into BackendOptions). A new backend is one class implementing ExecutionContext
// (execution_context.h) and one line in kBackends (backends.cpp); `--backend NAME` then selects
// it in run, serve, bench and bench-serve.
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/execution_context.h"
#include "kernels/matmul.h"

namespace peregrine {

struct BackendOptions {
  std::string name = "cpu";                   // a kBackends entry
  int threads = 1;                            // compute threads (the CPU's pool; a device's host threads)
  Activations activations = Activations::Q8;  // how activations meet quantized weights
};

struct BackendEntry {
  std::string_view name;
  std::string_view about;  // one line for --help
  std::shared_ptr<ExecutionContext> (*make)(const BackendOptions& options);
};

// The registered backends, the default ("cpu") first.
std::span<const BackendEntry> backend_registry();
// "cpu": the names for a help line or an error.
std::string backend_names();
// The context `options` name. Throws UsageError for an unknown backend (naming the choices) or
// options it cannot run with (a thread count out of range).
std::shared_ptr<ExecutionContext> make_context(const BackendOptions& options);

}  // namespace peregrine
