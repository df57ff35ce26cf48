#pragma once
// The execution context the model, engine and proposer tests compute on. PEREGRINE_TEST_BACKEND
// names a backend of backend/backends.h (default "cpu"); tests/CMakeLists.txt runs chosen test
// binaries a second time with PEREGRINE_TEST_BACKEND=guarded (the *_guarded tests), so the same
// assertions hold on a context whose memory the host cannot read outside its calls.
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backends.h"
#include "backend/cpu_context.h"
#include "kernels/thread_pool.h"

namespace peregrine::test {

// "cpu" unless PEREGRINE_TEST_BACKEND says otherwise.
inline std::string test_backend() {
  const char* env = std::getenv("PEREGRINE_TEST_BACKEND");
  return env != nullptr && *env != '\0' ? env : "cpu";
}

// A fresh context of the test backend with `threads` threads.
inline std::shared_ptr<ExecutionContext> make_test_context(int threads, Activations act = Activations::Q8) {
  if (test_backend() == "cpu") return std::make_shared<CpuContext>(threads, act);
  return make_context({.name = test_backend(), .threads = threads, .activations = act});
}

// One context per test binary, shared by its models (as shared_cpu_context() on the CPU).
inline std::shared_ptr<ExecutionContext> shared_test_context() {
  static const std::shared_ptr<ExecutionContext> context = test_backend() == "cpu"
                                                               ? std::shared_ptr<ExecutionContext>(shared_cpu_context())
                                                               : make_test_context(physical_core_count());
  return context;
}

}  // namespace peregrine::test
