#pragma once
// A command's processes: the whole model in this one, or one rank of a layout started by mpirun.
// Commands (cli/) use it the same way for run, bench, serve and bench-serve:
//
//   DistSession session(layout, "run");          // checks the launch; loads MPI only when needed
//   if (session.distributed()) {
//     session.load(open_file, context);         // every rank builds its shard; errors agreed
//     if (session.is_worker()) return session.serve_steps();
//     ... EngineCore core(session.runner(), ...) on rank 0
//   }
//
// Errors every rank would hit (wrong process count, a model that cannot be cut this way) are
// agreed on: rank 0 throws UsageError with the message, the others throw QuietExit (main exits
// quietly with 0), so the message appears once and mpirun's exit code is rank 0's.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "backend/execution_context.h"
#include "dist/communicator.h"
#include "dist/layout.h"
#include "dist/liveness.h"
#include "dist/mpi_communicator.h"
#include "dist/disagg_runner.h"
#include "dist/parallel_runner.h"
#include "dist/shard.h"
#include "format/model_file.h"

namespace peregrine::dist {

// A worker rank leaving because of an error rank 0 reports: exit with `code`, print nothing. The
// code is 0: mpirun kills the whole job as soon as one process exits with another, which could
// stop rank 0 before its message is out; rank 0's own exit code is the job's.
struct QuietExit {
  int code = 0;
};

class DistSession {
 public:
  // Checks `layout` against the launch (mpirun's environment) and, for several processes, starts
  // MPI. `rank_timeout`: how long a rank may stay silent (no heartbeat: dead, frozen or cut off)
  // before the job fails; a step itself may take up to kStepLimit while every rank is alive.
  DistSession(const Layout& layout, const std::string& command, std::chrono::milliseconds rank_timeout);
  // Rank 0: stops the workers and finalizes MPI; after a failure, ends the whole job instead.
  ~DistSession();
  DistSession(const DistSession&) = delete;
  DistSession& operator=(const DistSession&) = delete;

  bool distributed() const { return layout_.distributed(); }
  int rank() const { return rank_; }
  bool is_worker() const { return rank_ != 0; }
  const Layout& layout() const { return layout_; }

  // Collective: every rank opens the model file (`open`) and binds its slice on `context`. Any
  // rank's error is thrown on every rank (rank 0: UsageError; others: QuietExit).
  void load(const std::function<ModelFile()>& open, std::shared_ptr<ExecutionContext> context);
  // Rank 0, after load: the engine's runner.
  DistRunner& runner();
  // Rank 0: the shard's Model (a slice: its config is the whole model's).
  Model& model();
  // Worker ranks, after load: run steps until rank 0 shuts the layout down. Returns the exit
  // code; a failure is reported on stderr and ends the whole job.
  int serve_steps();
  // Ends every process of the job (after a failure that was reported).
  [[noreturn]] void abort_job(int code);
  Communicator& world() { return *world_; }
  // What this rank's communicators (the world and its tensor-parallel group) moved since the last
  // reset: for the performance figures.
  CommStats comm_stats() const;
  void reset_comm_stats();

 private:
  [[noreturn]] void raise_agreed(const std::string& message, int failed_rank);
  void agree(const std::optional<std::string>& error);
  // Heartbeats (after load): waits then last as long as a step needs while every rank is alive.
  void start_heartbeats();

  Layout layout_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0;
  std::shared_ptr<MpiRuntime> mpi_;
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Shard> shard_;  // a grid layout's part of the model
  std::unique_ptr<DistRunner> runner_;
  std::unique_ptr<Liveness> liveness_;
};

}  // namespace peregrine::dist
