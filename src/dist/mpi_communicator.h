#pragma once
// Communicator over MPI. The MPI library itself is reached through a plugin loaded at run time
// (mpi_api.h): a process that never asks for MPI never loads it.
#include <memory>

#include "dist/communicator.h"

namespace peregrine::dist {

struct MpiLibrary;  // the loaded plugin (mpi_communicator.cpp)

// MPI for this process: loaded and initialized by start(), finalized when the last communicator
// made from it is gone.
class MpiRuntime : public std::enable_shared_from_this<MpiRuntime> {
 public:
  // Loads the plugin and calls MPI_Init. Throws UsageError saying what is missing: a build
  // without MPI, or a machine without the MPI runtime.
  static std::shared_ptr<MpiRuntime> start();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // The communicator of every process of the job (MPI_COMM_WORLD).
  std::unique_ptr<Communicator> world();

 private:
  explicit MpiRuntime(std::unique_ptr<MpiLibrary> lib);
  friend class MpiCommunicator;
  std::unique_ptr<MpiLibrary> lib_;
  int rank_ = 0, size_ = 1;
};

}  // namespace peregrine::dist
