// The MPI plugin: each PgMpiApi function is one MPI call on bytes. Handles are heap copies of
// MPI_Comm / MPI_Request, so the plugin's users never see an MPI type.
#include <mpi.h>

#include <climits>
#include <cstring>
#include <vector>

#include "dist/mpi_api.h"

namespace {

MPI_Comm comm_of(void* c) { return *static_cast<MPI_Comm*>(c); }

MPI_Comm world_handle = MPI_COMM_WORLD;

// A request in flight, with whatever MPI must be able to read until it completes (the count and
// displacement arrays of an all-to-all-v).
struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> arrays;
};

int start(MPI_Request r, void** req) {
  *req = new Pending{r, {}};
  return MPI_SUCCESS;
}

bool too_large(int64_t n) { return n < 0 || n > INT_MAX; }

int pg_init(int* rank, int* size) {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) return rc;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  return MPI_Comm_size(MPI_COMM_WORLD, size);
}

int pg_finalize() { return MPI_Finalize(); }

void pg_abort(void* comm, int code) { MPI_Abort(comm ? comm_of(comm) : MPI_COMM_WORLD, code); }

void* pg_world() { return &world_handle; }

int pg_comm_split(void* comm, int color, int key, void** out) {
  MPI_Comm c;
  const int rc = MPI_Comm_split(comm_of(comm), color, key, &c);
  if (rc != MPI_SUCCESS) return rc;
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  *out = new MPI_Comm(c);
  return MPI_SUCCESS;
}

void pg_comm_free(void* comm) {
  auto* c = static_cast<MPI_Comm*>(comm);
  if (c == &world_handle) return;
  MPI_Comm_free(c);
  delete c;
}

int pg_comm_rank(void* comm, int* rank) { return MPI_Comm_rank(comm_of(comm), rank); }
int pg_comm_size(void* comm, int* size) { return MPI_Comm_size(comm_of(comm), size); }

int pg_ibcast(void* comm, void* buf, int64_t n, int root, void** req) {
  if (too_large(n)) return kPgMpiTooLarge;
  MPI_Request r;
  const int rc = MPI_Ibcast(buf, static_cast<int>(n), MPI_BYTE, root, comm_of(comm), &r);
  return rc == MPI_SUCCESS ? start(r, req) : rc;
}

int pg_iallgather(void* comm, const void* send, int64_t n, void* recv, void** req) {
  if (too_large(n)) return kPgMpiTooLarge;
  MPI_Request r;
  const int rc = MPI_Iallgather(send, static_cast<int>(n), MPI_BYTE, recv, static_cast<int>(n), MPI_BYTE,
                                comm_of(comm), &r);
  return rc == MPI_SUCCESS ? start(r, req) : rc;
}

// MPI reads the count and displacement arrays until the operation completes: they live in its
// Pending.
int pg_ialltoallv(void* comm, const void* send, const int64_t* send_counts, void* recv, const int64_t* recv_counts,
                  void** req) {
  int size = 0;
  MPI_Comm_size(comm_of(comm), &size);
  auto pending = new Pending;
  std::vector<int>& a = pending->arrays;  // [send counts][send displs][recv counts][recv displs]
  a.assign(4 * static_cast<size_t>(size), 0);
  int64_t so = 0, ro = 0;
  for (int i = 0; i < size; ++i) {
    if (too_large(send_counts[i]) || too_large(recv_counts[i]) || too_large(so) || too_large(ro)) {
      delete pending;
      return kPgMpiTooLarge;
    }
    a[i] = static_cast<int>(send_counts[i]);
    a[size + i] = static_cast<int>(so);
    a[2 * size + i] = static_cast<int>(recv_counts[i]);
    a[3 * size + i] = static_cast<int>(ro);
    so += send_counts[i];
    ro += recv_counts[i];
  }
  const int rc = MPI_Ialltoallv(send, a.data(), a.data() + size, MPI_BYTE, recv, a.data() + 2 * size,
                                a.data() + 3 * size, MPI_BYTE, comm_of(comm), &pending->request);
  if (rc != MPI_SUCCESS) {
    delete pending;
    return rc;
  }
  *req = pending;
  return MPI_SUCCESS;
}

int pg_isend(void* comm, const void* buf, int64_t n, int dest, int tag, void** req) {
  if (too_large(n)) return kPgMpiTooLarge;
  MPI_Request r;
  const int rc = MPI_Isend(buf, static_cast<int>(n), MPI_BYTE, dest, tag, comm_of(comm), &r);
  return rc == MPI_SUCCESS ? start(r, req) : rc;
}

int pg_irecv(void* comm, void* buf, int64_t n, int source, int tag, void** req) {
  if (too_large(n)) return kPgMpiTooLarge;
  MPI_Request r;
  const int rc = MPI_Irecv(buf, static_cast<int>(n), MPI_BYTE, source, tag, comm_of(comm), &r);
  return rc == MPI_SUCCESS ? start(r, req) : rc;
}

int pg_test(void** req, int* done) {
  auto* r = static_cast<Pending*>(*req);
  const int rc = MPI_Test(&r->request, done, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS && *done) {
    delete r;
    *req = nullptr;
  }
  return rc;
}

int pg_iprobe(void* comm, int source, int tag, int* found, int64_t* n) {
  MPI_Status st;
  const int rc = MPI_Iprobe(source, tag, comm_of(comm), found, &st);
  if (rc == MPI_SUCCESS && *found) {
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    *n = count;
  }
  return rc;
}

void pg_error_string(int code, char* out, int out_len) {
  if (code == kPgMpiTooLarge) {
    std::strncpy(out, "message larger than 2 GiB", static_cast<size_t>(out_len));
  } else {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = 0;
    std::strncpy(out, text, static_cast<size_t>(out_len));
  }
  out[out_len - 1] = 0;
}

void pg_library_version(char* out, int out_len) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  text[len] = 0;
  std::strncpy(out, text, static_cast<size_t>(out_len));
  out[out_len - 1] = 0;
}

const PgMpiApi kApi = {kPgMpiAbiVersion, pg_init,   pg_finalize, pg_abort,        pg_world,
                       pg_comm_split,    pg_comm_free, pg_comm_rank, pg_comm_size, pg_ibcast,
                       pg_iallgather,    pg_ialltoallv, pg_isend,  pg_irecv,        pg_test,
                       pg_iprobe,        pg_error_string, pg_library_version};

}  // namespace

extern "C" __attribute__((visibility("default"))) const PgMpiApi* peregrine_mpi_api(void) { return &kApi; }
