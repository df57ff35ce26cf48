#include "backend/backends.h"

#include <algorithm>

#include "backend/cpu_context.h"
#include "backend/guarded_context.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::shared_ptr<ExecutionContext> make_cpu(const BackendOptions& o) {
  return std::make_shared<CpuContext>(o.threads, o.activations);
}

std::shared_ptr<ExecutionContext> make_guarded(const BackendOptions& o) {
  return std::make_shared<GuardedContext>(o.threads, o.activations);
}

// One line per backend.
constexpr BackendEntry kBackends[] = {
    {"cpu", "the kernels/ on a thread pool, the best instruction set this CPU runs (or PEREGRINE_ISA)", make_cpu},
    {"guarded",
     "checks the seam: scalar kernels on memory the host cannot read outside the context's calls; slow, for tests",
     make_guarded},
};

}  // namespace

std::span<const BackendEntry> backend_registry() { return kBackends; }

std::string backend_names() {
  std::string out;
  for (const BackendEntry& b : kBackends) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

std::shared_ptr<ExecutionContext> make_context(const BackendOptions& options) {
  const auto it = std::find_if(std::begin(kBackends), std::end(kBackends),
                               [&](const BackendEntry& b) { return b.name == options.name; });
  if (it == std::end(kBackends)) {
    throw UsageError("--backend '" + options.name + "': expected " + backend_names());
  }
  return it->make(options);
}

}  // namespace peregrine
