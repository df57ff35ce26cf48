#pragma once
// The seam between the engine's parallel layouts and whatever moves bytes between processes.
// One interface (broadcast, all-reduce, all-gather, all-to-all-v, send/recv) so a GPU collective
// library can be added behind it later; MPI is the implementation today (mpi_communicator.h).
//
// Every collective is called by every rank of the communicator, in the same order. Every wait
// has a deadline (set_timeout): a rank that died or hangs makes the others throw CommError
// within that time instead of waiting forever.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace peregrine::dist {

// A peer did not answer in time, or the transport reported a failure. The message names the
// operation and, where known, the rank.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What one communicator moved, for the performance figures (docs/performance.md).
struct CommStats {
  int64_t bytes_sent = 0;      // payload bytes this rank sent (a collective counts what it contributes to others)
  int64_t bytes_received = 0;  // payload bytes this rank received
  int64_t all_reduces = 0;
  double all_reduce_s = 0;     // wall time inside all_reduce_sum (transfer, waiting for peers, the sum)
  double wait_s = 0;           // wall time waiting on any operation
};

// A process-wide stop: once a signal asked it (the launcher ends the job when one of its processes
// failed, or someone interrupted it), every wait throws CommError at once instead of waiting for
// peers that are being stopped too. request_stop is async-signal-safe.
void request_stop(int signal_number);
int stop_requested();  // the signal, or 0
// Throws CommError naming the signal if a stop was requested.
void throw_if_stop_requested();

// A send running in the background (Communicator::start_send).
class PendingSend {
 public:
  virtual ~PendingSend() = default;
  // Completes the send (CommError at the communicator's timeout). Its buffer may be reused after.
  virtual void wait() = 0;
  virtual bool done() = 0;  // completes it if it can without waiting
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What the transport is ("Open MPI v4.1.4 ..."), for logs.
  virtual std::string describe() const = 0;

  // `data` (the same size on every rank) takes root's bytes.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // all = every rank's `mine` in rank order (all.size() == size() * mine.size()).
  virtual void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) = 0;
  // Rank r sends send_counts[j] bytes to each rank j (consecutive in `send`, in rank order) and
  // receives recv_counts[j] bytes from each rank j (consecutive in `recv`).
  virtual void all_to_all_v(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                            std::span<std::byte> recv, std::span<const int64_t> recv_counts) = 0;
  // Point to point. A send returns once its buffer may be reused.
  virtual void send(std::span<const std::byte> data, int dest, int tag) = 0;
  virtual void recv(std::span<std::byte> data, int source, int tag) = 0;
  // Starts sending `data`, which must stay alive and unchanged until the send completes; a rank
  // goes on computing while the bytes travel (a pipeline stage hands its output on this way).
  virtual std::unique_ptr<PendingSend> start_send(std::span<const std::byte> data, int dest, int tag) = 0;
  // Receives one whole message of a size the receiver does not know (out is resized to it).
  virtual void recv_message(std::vector<std::byte>& out, int source, int tag) = 0;
  // Size in bytes of a message from `source` with `tag` that has arrived and not been received;
  // nullopt if none. Never blocks.
  virtual std::optional<int64_t> probe(int source, int tag) = 0;
  // A communicator of the ranks that pass the same `color`, ordered by `key` (collective).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every process of the job with `code` (never returns).
  [[noreturn]] virtual void abort(int code) = 0;

  // x = the sum of every rank's x, added in rank order, so every rank and every run get the same
  // bits (a tree or ring reduction would add in an order that depends on the algorithm chosen).
  // The default gathers every rank's x and adds them; a transport may do better.
  virtual void all_reduce_sum(std::span<float> x);

  // The longest any one wait may take before CommError (default 30 s).
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Called while a wait is long (after its first spins): throws CommError when a peer is known to
  // be dead (dist/liveness.h), so a wait ends then, not at the timeout. Communicators split from
  // this one inherit it.
  void set_health_check(std::function<void()> check) { health_check_ = std::move(check); }

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  // Typed helpers over the byte operations.
  template <class T>
  void send_values(std::span<const T> v, int dest, int tag) {
    send(std::as_bytes(v), dest, tag);
  }
  template <class T>
  void recv_values(std::span<T> v, int source, int tag) {
    recv(std::as_writable_bytes(v), source, tag);
  }
  template <class T>
  void broadcast_value(T& v, int root) {
    broadcast(std::as_writable_bytes(std::span<T, 1>(&v, 1)), root);
  }

 protected:
  void check_health() const {
    if (health_check_) health_check_();
  }

  CommStats stats_;
  std::chrono::milliseconds timeout_{30000};
  std::function<void()> health_check_;

 private:
  std::vector<float> gathered_;  // all_reduce_sum's scratch: [size()][x.size()]
};

}  // namespace peregrine::dist
