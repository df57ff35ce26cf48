#pragma once
// The C interface between peregrine and its MPI plugin (libperegrine_mpi.so, built from
// mpi_shim.cpp, the only file that includes <mpi.h>). peregrine loads the plugin with dlopen
// only when a run asks for several processes, so the binary starts, and every single-process
// command works, on a machine without an MPI runtime; a missing runtime is one clear error.
// Handles are opaque; every function returns 0 or an MPI error code (error_string names it).
#include <cstdint>

extern "C" {

struct PgMpiApi {
  int abi_version;  // kPgMpiAbiVersion
  // MPI_Init_thread (MPI_THREAD_SERIALIZED: one thread at a time calls MPI); errors on the world
  // communicator and those split from it are returned, not fatal.
  int (*init)(int* world_rank, int* world_size);
  int (*finalize)(void);
  void (*abort)(void* comm, int code);
  void* (*world)(void);
  int (*comm_split)(void* comm, int color, int key, void** out);
  void (*comm_free)(void* comm);
  int (*comm_rank)(void* comm, int* rank);
  int (*comm_size)(void* comm, int* size);
  // Nonblocking operations on bytes; *req is completed (and freed) by test().
  int (*ibcast)(void* comm, void* buf, int64_t n, int root, void** req);
  int (*iallgather)(void* comm, const void* send, int64_t n, void* recv, void** req);
  int (*ialltoallv)(void* comm, const void* send, const int64_t* send_counts, void* recv,
                    const int64_t* recv_counts, void** req);
  int (*isend)(void* comm, const void* buf, int64_t n, int dest, int tag, void** req);
  int (*irecv)(void* comm, void* buf, int64_t n, int source, int tag, void** req);
  // *done = 1 once complete (the request is then freed and *req cleared).
  int (*test)(void** req, int* done);
  // *found = 1 and *n = its size if a message from source with tag has arrived.
  int (*iprobe)(void* comm, int source, int tag, int* found, int64_t* n);
  void (*error_string)(int code, char* out, int out_len);
  void (*library_version)(char* out, int out_len);
};

typedef const PgMpiApi* (*PgMpiApiEntry)(void);
// The plugin's one exported symbol.
const PgMpiApi* peregrine_mpi_api(void);

}  // extern "C"

inline constexpr int kPgMpiAbiVersion = 1;
// Returned for a message over 2 GiB (MPI counts are int).
inline constexpr int kPgMpiTooLarge = -1000;
