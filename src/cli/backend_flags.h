#pragma once
// Where a command computes, shared by `run`, `serve`, `bench` and `bench-serve`:
//   --backend NAME    the execution context (backend/backends.h: cpu)
//   -t, --threads N   compute threads (the physical cores shared among the processes mpirun
//                     started on this machine, unless given)
//   --activations     q8|f32 (cli/activation_flag.h)
// Every command builds its context from these through backend/backends.h's make_context.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backends.h"
#include "cli/activation_flag.h"
#include "cli/args.h"

namespace peregrine::cli {

struct BackendFlags {
  std::string backend = "cpu";
  int64_t threads = 0;  // 0 until add_to(): then default_threads()
  ActivationFlag activations;

  void add_to(ArgParser& parser);
  BackendOptions options() const;
  // The context these flags name. Throws UsageError for an unknown backend or activation mode.
  std::shared_ptr<ExecutionContext> make_context() const;
};

}  // namespace peregrine::cli
