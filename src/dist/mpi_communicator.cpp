#include "dist/mpi_communicator.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "dist/mpi_api.h"
#include "util/error.h"

namespace peregrine::dist {

struct MpiLibrary {
  void* handle = nullptr;
  const PgMpiApi* api = nullptr;
};

namespace {

using Clock = std::chrono::steady_clock;

std::filesystem::path plugin_path() {
  if (const char* env = std::getenv("PEREGRINE_MPI_PLUGIN")) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto next_to_binary = exe.parent_path() / "libperegrine_mpi.so";
    if (std::filesystem::exists(next_to_binary)) return next_to_binary;
  }
#ifdef PEREGRINE_MPI_PLUGIN_PATH
  return PEREGRINE_MPI_PLUGIN_PATH;  // the build tree's copy (tests run from elsewhere)
#else
  return {};
#endif
}

std::unique_ptr<MpiLibrary> load_plugin() {
  const std::filesystem::path path = plugin_path();
  if (path.empty() || !std::filesystem::exists(path)) {
    throw UsageError(
        "this peregrine was built without MPI (libperegrine_mpi.so is missing" +
        (path.empty() ? std::string() : ": " + path.string()) +
        "); install Open MPI (scripts/setup.sh installs libopenmpi-dev and openmpi-bin) and rebuild");
  }
  // RTLD_GLOBAL: Open MPI's own components resolve MPI symbols against the already loaded library.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    throw UsageError(std::string("the MPI runtime could not be loaded (") + dlerror() +
                     "); install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) and launch with mpirun");
  }
  auto entry = reinterpret_cast<PgMpiApiEntry>(dlsym(handle, "peregrine_mpi_api"));
  const PgMpiApi* api = entry ? entry() : nullptr;
  if (api == nullptr || api->abi_version != kPgMpiAbiVersion) {
    dlclose(handle);
    throw UsageError(path.string() + " is not this peregrine's MPI plugin (rebuild it)");
  }
  auto lib = std::make_unique<MpiLibrary>();
  lib->handle = handle;
  lib->api = api;
  return lib;
}

std::string error_text(const PgMpiApi* api, int code) {
  char text[512];
  api->error_string(code, text, sizeof text);
  return text;
}

}  // namespace

// One MPI communicator. Every operation is started nonblocking and completed by polling with a
// deadline: a short spin (a peer that is just behind answers within microseconds), then yields,
// then short sleeps (an idle rank waiting for work costs no core), and CommError at the timeout.
class MpiPendingSend;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiRuntime> runtime, void* comm) : runtime_(std::move(runtime)), comm_(comm) {
    check(api()->comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(api()->comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override { api()->comm_free(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override {
    char text[256];
    api()->library_version(text, sizeof text);
    std::string s = text;
    if (auto nl = s.find_first_of("\r\n,"); nl != std::string::npos) s.resize(nl);
    return s;
  }

  void broadcast(std::span<std::byte> data, int root) override {
    void* req = nullptr;
    check(api()->ibcast(comm_, data.data(), static_cast<int64_t>(data.size()), root, &req), "broadcast");
    wait(req, "broadcast", root);
    (rank_ == root ? stats_.bytes_sent : stats_.bytes_received) += static_cast<int64_t>(data.size());
  }

  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (all.size() != mine.size() * static_cast<size_t>(size_)) throw UsageError("all_gather: buffer sizes differ");
    void* req = nullptr;
    check(api()->iallgather(comm_, mine.data(), static_cast<int64_t>(mine.size()), all.data(), &req), "all-gather");
    wait(req, "gather (all-gather)", -1);
    stats_.bytes_sent += static_cast<int64_t>(mine.size()) * (size_ - 1);
    stats_.bytes_received += static_cast<int64_t>(mine.size()) * (size_ - 1);
  }

  void all_to_all_v(std::span<const std::byte> send, std::span<const int64_t> send_counts, std::span<std::byte> recv,
                    std::span<const int64_t> recv_counts) override {
    if (send_counts.size() != static_cast<size_t>(size_) || recv_counts.size() != static_cast<size_t>(size_)) {
      throw UsageError("all_to_all_v: one count per rank");
    }
    int64_t sent = 0, received = 0;
    for (int r = 0; r < size_; ++r) {
      sent += send_counts[r];
      received += recv_counts[r];
    }
    if (static_cast<size_t>(sent) > send.size() || static_cast<size_t>(received) > recv.size()) {
      throw UsageError("all_to_all_v: counts exceed the buffers");
    }
    void* req = nullptr;
    check(api()->ialltoallv(comm_, send.data(), send_counts.data(), recv.data(), recv_counts.data(), &req),
          "all-to-all");
    wait(req, "exchange (all-to-all)", -1);
    stats_.bytes_sent += sent - send_counts[rank_];
    stats_.bytes_received += received - recv_counts[rank_];
  }

  void send(std::span<const std::byte> data, int dest, int tag) override {
    void* req = nullptr;
    check(api()->isend(comm_, data.data(), static_cast<int64_t>(data.size()), dest, tag, &req), "send");
    wait(req, "transfer (send)", dest);
    stats_.bytes_sent += static_cast<int64_t>(data.size());
  }

  std::unique_ptr<PendingSend> start_send(std::span<const std::byte> data, int dest, int tag) override;

  void recv_message(std::vector<std::byte>& out, int source, int tag) override {
    // Probe until the message is there (the same spin / yield / sleep with a deadline as wait()),
    // then receive it: messages from one source with one tag arrive in order.
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0;; ++i) {
      if (const auto n = probe(source, tag)) {
        out.resize(static_cast<size_t>(*n));
        recv(out, source, tag);
        return;
      }
      if (i < 2000) continue;
      throw_if_stop_requested();
      check_health();
      const auto waited = Clock::now() - start;
      if (waited > timeout_) throw timeout_error("transfer (receive)", source);
      pause(waited);
    }
  }

  void recv(std::span<std::byte> data, int source, int tag) override {
    void* req = nullptr;
    check(api()->irecv(comm_, data.data(), static_cast<int64_t>(data.size()), source, tag, &req), "receive");
    wait(req, "transfer (receive)", source);
    stats_.bytes_received += static_cast<int64_t>(data.size());
  }

  std::optional<int64_t> probe(int source, int tag) override {
    int found = 0;
    int64_t n = 0;
    check(api()->iprobe(comm_, source, tag, &found, &n), "probe");
    if (found) return n;
    return std::nullopt;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    void* out = nullptr;
    check(api()->comm_split(comm_, color, key, &out), "MPI_Comm_split");
    auto c = std::make_unique<MpiCommunicator>(runtime_, out);
    c->set_timeout(timeout_);
    c->set_health_check(health_check_);
    return c;
  }

  [[noreturn]] void abort(int code) override {
    api()->abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, leave anyway
  }

 private:
  friend class MpiPendingSend;

  const PgMpiApi* api() const { return runtime_->lib_->api; }

  void check(int rc, const char* what) const {
    if (rc != 0) throw CommError(std::string("MPI ") + what + " failed: " + error_text(api(), rc));
  }

  // Completes `req` or throws CommError once the timeout passes. `peer` names the rank waited
  // for (-1: some rank of the group).
  void wait(void*& req, const char* what, int peer) {
    int done = 0;
    check(api()->test(&req, &done), what);
    if (done) return;
    const Clock::time_point start = Clock::now();
    for (int64_t i = 1; !done; ++i) {
      check(api()->test(&req, &done), what);
      if (done || i < 2000) continue;
      throw_if_stop_requested();
      check_health();
      const auto waited = Clock::now() - start;
      if (waited > timeout_) throw timeout_error(what, peer);
      pause(waited);
    }
    stats_.wait_s += std::chrono::duration<double>(Clock::now() - start).count();
  }


  // Waiting long: yield the core at first (the peer is just behind), then sleep in short naps (an
  // idle rank costs nothing).
  static void pause(Clock::duration waited) {
    if (waited < std::chrono::milliseconds(2)) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  CommError timeout_error(const char* what, int peer) const {
    char text[160];
    std::snprintf(text, sizeof text, " did not take part in a %s with rank %d within %.1f s: dead or hung", what, rank_,
                  std::chrono::duration<double>(timeout_).count());
    // In a group of two the late one is the other; in a larger group a collective cannot tell.
    const int late = peer >= 0 ? peer : size_ == 2 ? 1 - rank_ : -1;
    const std::string who = late >= 0 ? "rank " + std::to_string(late) + (size_ > 2 ? " of this group" : "")
                                      : "a rank of this group of " + std::to_string(size_);
    return CommError(who + text);
  }

  std::shared_ptr<MpiRuntime> runtime_;
  void* comm_;
  int rank_ = 0, size_ = 1;
};

class MpiPendingSend final : public PendingSend {
 public:
  MpiPendingSend(MpiCommunicator& comm, void* req, int dest) : comm_(comm), req_(req), dest_(dest) {}
  void wait() override {
    if (req_ != nullptr) comm_.wait(req_, "transfer (send)", dest_);
  }
  bool done() override {
    int flag = 1;
    if (req_ != nullptr) comm_.check(comm_.api()->test(&req_, &flag), "send");
    return flag != 0;
  }

 private:
  MpiCommunicator& comm_;
  void* req_;
  int dest_;
};

std::unique_ptr<PendingSend> MpiCommunicator::start_send(std::span<const std::byte> data, int dest, int tag) {
  void* req = nullptr;
  check(api()->isend(comm_, data.data(), static_cast<int64_t>(data.size()), dest, tag, &req), "send");
  stats_.bytes_sent += static_cast<int64_t>(data.size());
  return std::make_unique<MpiPendingSend>(*this, req, dest);
}

MpiRuntime::MpiRuntime(std::unique_ptr<MpiLibrary> lib) : lib_(std::move(lib)) {}

std::shared_ptr<MpiRuntime> MpiRuntime::start() {
  auto lib = load_plugin();
  int rank = 0, size = 1;
  if (const int rc = lib->api->init(&rank, &size); rc != 0) {
    throw UsageError("MPI_Init failed: " + error_text(lib->api, rc));
  }
  std::shared_ptr<MpiRuntime> rt(new MpiRuntime(std::move(lib)));
  rt->rank_ = rank;
  rt->size_ = size;
  return rt;
}

MpiRuntime::~MpiRuntime() {
  lib_->api->finalize();
  // The library stays loaded: Open MPI leaves threads and handlers behind until the process exits.
}

std::unique_ptr<Communicator> MpiRuntime::world() {
  return std::make_unique<MpiCommunicator>(shared_from_this(), lib_->api->world());
}

}  // namespace peregrine::dist
