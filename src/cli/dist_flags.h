#pragma once
// The multi-process layout flags, shared by `run`, `bench`, `serve` and `bench-serve`:
//   --tp T                     tensor-parallel ranks (every weight matrix cut in T slices)
//   --pp P                     pipeline stages (layer ranges)
//   --ep                       experts spread over the tensor-parallel ranks (MoE models)
//   --disaggregate PREFILL:DECODE   separate prefill and decode pools of ranks
//   --rank-timeout SECONDS     how long a rank may go without a heartbeat before the job fails
// Launched as `mpirun -np N peregrine COMMAND ... --tp T --pp P` with N = T x P.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/spec_flags.h"
#include "dist/layout.h"
#include "dist/session.h"

namespace peregrine::cli {

struct DistFlags {
  int64_t tp = 1, pp = 1;
  bool ep = false;
  std::optional<std::string> disaggregate;
  double rank_timeout_s = 5;

  void add_to(ArgParser& parser);
  dist::Layout layout() const;  // throws UsageError for a bad --disaggregate
  // Starts the session for `command` (checks the launch; MPI only for several processes).
  std::unique_ptr<dist::DistSession> start(const std::string& command) const;
  // Speculation a layout cannot run: prediction heads read the whole output matrix and the final
  // hidden states, which a tensor- or pipeline-parallel rank 0 does not hold.
  void check_spec(const SpecFlags& spec) const;
};

// Compute threads per process when none are asked for: the physical cores shared among the
// processes mpirun started on this machine.
int64_t default_threads();

}  // namespace peregrine::cli
