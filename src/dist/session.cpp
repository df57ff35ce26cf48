#include "dist/session.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace peregrine::dist {
namespace {

// Loading a model can take long on a slow disk: setup waits get this much.
constexpr std::chrono::milliseconds kSetupTimeout{600000};
constexpr size_t kErrorBytes = 1024;
// With heartbeats, one wait (a step's all-reduce, a prompt's logits) may last this long while every
// rank is alive: a slow step is not a dead rank (a rank whose heartbeat thread lives while its
// steps are stuck is still caught, late).
constexpr std::chrono::milliseconds kStepLimit{600000};
constexpr std::chrono::milliseconds kHeartbeatSetup{30000};

}  // namespace

DistSession::DistSession(const Layout& layout, const std::string& command, std::chrono::milliseconds rank_timeout)
    : layout_(layout), timeout_(rank_timeout) {
  const LaunchEnv env = detect_launch();
  rank_ = env.rank;
  try {
    check_launch(layout_, env, command);
    if (layout_.disaggregated() && (layout_.tp > 1 || layout_.pp > 1)) {
      throw UsageError("--disaggregate: each pool is a tensor-parallel group of its own; --tp and --pp do not apply");
    }
    if (layout_.ep && !layout_.disaggregated() && layout_.tp < 2) {
      throw UsageError("--ep spreads a mixture of experts' experts over the tensor-parallel ranks: give --tp 2 or more");
    }
    if (layout_.ep && layout_.disaggregated() && std::max(layout_.prefill_ranks, layout_.decode_ranks) < 2) {
      throw UsageError(
          "--ep spreads a mixture of experts' experts over a pool's ranks: give a pool of 2 or more "
          "(--disaggregate 1:2)");
    }
  } catch (const UsageError&) {
    if (rank_ != 0) throw QuietExit{};
    throw;
  }
  if (!layout_.distributed()) return;
  // SIGTERM / SIGINT (from mpirun when another process failed, or from a person): stop waiting
  // for peers at once. A command that takes these signals itself (serve's drain) blocks them, so
  // this handler never runs there; it calls request_stop itself.
  struct sigaction action {};
  action.sa_handler = [](int sig) { request_stop(sig); };
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  mpi_ = MpiRuntime::start();
  world_ = mpi_->world();
  if (world_->rank() != rank_ || world_->size() != layout_.ranks()) {
    throw UsageError("MPI reports rank " + std::to_string(world_->rank()) + " of " + std::to_string(world_->size()) +
                     ", the launcher's environment said rank " + std::to_string(rank_));
  }
  world_->set_timeout(kSetupTimeout);
}

DistSession::~DistSession() {
  if (!world_) return;
  bool failed = runner_ && runner_->failed();
  if (runner_ && !failed) {
    try {
      runner_->shutdown();  // the workers leave their loop
    } catch (const std::exception&) {
      // Reported by the runner.
    }
    failed = runner_->failed();
  }
  runner_.reset();
  if (!failed && stop_requested() == 0) liveness_.reset();  // goodbye: the workers' waits end normally
  // Workers still waiting for steps (or peers that are gone) would hold MPI_Finalize: end the job.
  if (failed || stop_requested() != 0) abort_job(1);
  shard_.reset();
  world_.reset();
  mpi_.reset();  // MPI_Finalize once the last communicator is gone
}

void DistSession::raise_agreed(const std::string& message, int failed_rank) {
  if (rank_ != 0) throw QuietExit{};
  throw UsageError(failed_rank == 0 ? message : "rank " + std::to_string(failed_rank) + ": " + message);
}

// Every rank says whether its setup worked; all of them throw the first failure.
void DistSession::agree(const std::optional<std::string>& error) {
  std::vector<char> mine(kErrorBytes, 0), all(kErrorBytes * static_cast<size_t>(world_->size()));
  if (error) {
    mine[0] = 1;
    std::strncpy(mine.data() + 1, error->c_str(), kErrorBytes - 2);
  }
  world_->all_gather(std::as_bytes(std::span<const char>(mine)), std::as_writable_bytes(std::span<char>(all)));
  for (int r = 0; r < world_->size(); ++r) {
    const char* entry = all.data() + static_cast<size_t>(r) * kErrorBytes;
    if (entry[0] != 0) raise_agreed(std::string(entry + 1), r);
  }
}

void DistSession::load(const std::function<ModelFile()>& open, std::shared_ptr<ExecutionContext> context) {
  std::optional<std::string> error;
  try {
    // Each pool a tensor-parallel group: group 1 decodes (with rank 0), group 0 prefills.
    if (layout_.disaggregated()) {
      const bool decoding = layout_.in_decode_pool(rank_);
      const int pool = decoding ? layout_.decode_ranks : layout_.prefill_ranks;
      // With --ep a pool of several ranks spreads the experts over them (a pool of one holds them all).
      const GridPlace place = grid_place(pool, 1, decoding ? rank_ : rank_ - layout_.decode_ranks, layout_.ep);
      shard_ = std::make_unique<Shard>(open(), std::move(context), place, *world_, decoding ? 1 : 0);
    } else {
      const GridPlace place = grid_place(layout_.tp, layout_.pp, rank_, layout_.ep);
      shard_ = std::make_unique<Shard>(open(), std::move(context), place, *world_);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(error);
  start_heartbeats();
  if (rank_ != 0) return;
  if (layout_.disaggregated()) {
    runner_ = std::make_unique<DisaggRunner>(*shard_, layout_);
  } else {
    runner_ = std::make_unique<ParallelRunner>(*shard_);
  }
}

void DistSession::start_heartbeats() {
  std::optional<std::string> error;
  try {
    liveness_ = std::make_unique<Liveness>(*world_, timeout_, kHeartbeatSetup);
  } catch (const CommError& e) {
    error = e.what();
  }
  agree(error);
  const auto check = [l = liveness_.get()] { l->check(); };
  for (Communicator* c : {world_.get(), shard_ ? &shard_->tp_group() : nullptr}) {
    if (c == nullptr) continue;
    c->set_health_check(check);
    c->set_timeout(kStepLimit);
  }
}

DistRunner& DistSession::runner() {
  if (!runner_) throw UsageError("dist session: no runner (not rank 0, or not loaded)");
  return *runner_;
}

Model& DistSession::model() {
  if (!shard_) throw UsageError("dist session: not loaded");
  return shard_->model();
}

int DistSession::serve_steps() {
  try {
    // Rank 0's heartbeats (liveness_) say whether it is alive; its next step may be long in coming.
    const auto heartbeat = kStepLimit;
    if (layout_.disaggregated()) {
      run_disagg_worker(*shard_, layout_, heartbeat);
    } else {
      run_worker(*shard_, heartbeat);
    }
  } catch (const std::exception& e) {
    if (stop_requested() != 0) std::_Exit(1);  // the launcher is ending the job; rank 0 or mpirun says why
    std::fprintf(stderr, "peregrine: rank %d: error: %s\n", rank_, e.what());
    std::fflush(stderr);
    abort_job(1);
  }
  return 0;
}

CommStats DistSession::comm_stats() const {
  CommStats total = world_->stats();
  if (shard_) {
    const CommStats& tp = shard_->tp_group().stats();
    total.bytes_sent += tp.bytes_sent;
    total.bytes_received += tp.bytes_received;
    total.all_reduces += tp.all_reduces;
    total.all_reduce_s += tp.all_reduce_s;
    total.wait_s += tp.wait_s;
  }
  return total;
}

void DistSession::reset_comm_stats() {
  world_->reset_stats();
  if (shard_) shard_->tp_group().reset_stats();
}

void DistSession::abort_job(int code) {
  static std::atomic<bool> aborting{false};
  std::fflush(nullptr);
  if (aborting.exchange(true)) {
    // Another thread is already ending the job: MPI must not be entered twice at once.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::_Exit(code);
  }
  // MPI_Abort asks the launcher to end every process; should it not return (its host cut off from
  // the launcher's), leave anyway.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::_Exit(code);
  }).detach();
  world_->abort(code);
  std::_Exit(code);  // abort() does not return
}

}  // namespace peregrine::dist
