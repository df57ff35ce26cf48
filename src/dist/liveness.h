#pragma once
// Heartbeats between rank 0 and every other rank, independent of the steps: a slow step is not a
// dead rank. Each rank keeps one TCP connection to rank 0 (plain sockets beside MPI) on which a
// thread of its own writes a byte every 200 ms and reads the other side's, whatever the rank's
// compute threads are doing; rank 0 watches every other rank, the others watch rank 0.
//
// A watched peer is dead when
//   - its connection closes without a goodbye (the process was killed: the kernel closes the
//     socket at once, so this is noticed within a round trip), or
//   - no byte came from it for `silence_limit` (the process is frozen or its host unreachable).
// A short outage (a link down for 2 s, lost packets) only delays the bytes: TCP retransmits them,
// and nothing fails unless the silence outlasts the limit.
//
// Waits of the communicators call check() (Communicator::set_health_check), so a step may take as
// long as it needs while its peers are alive, and ends within the limit when one is not.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace peregrine::dist {

class Liveness {
 public:
  // Collective over `world`: rank 0 listens, tells the others where (broadcast), and each connects.
  // Throws CommError when a rank cannot reach rank 0 within `setup_limit`.
  Liveness(Communicator& world, std::chrono::milliseconds silence_limit, std::chrono::milliseconds setup_limit);
  // Says goodbye to the peers (their closed connection is then no failure) and stops the thread.
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // Why a watched peer counts as dead, or nullopt while every one is alive.
  std::optional<std::string> problem() const;
  // Throws CommError with problem() if there is one.
  void check() const;
  std::chrono::milliseconds silence_limit() const { return limit_; }

 private:
  struct Peer {
    int rank = -1;
    int fd = -1;
    std::string address;                    // "10.77.0.2", for messages
    std::atomic<int64_t> last_heard_ns{0};  // steady clock
    std::atomic<bool> closed{false};        // connection ended without a goodbye
    std::atomic<bool> left{false};          // said goodbye
  };
  // A worker: connects to the first of rank 0's addresses it reaches and says who it is.
  bool connect_to_rank0(const uint32_t* addresses, int n, uint16_t port);
  // Rank 0: the other ranks' connections, within `limit`.
  bool accept_peers(int listener, int n, std::chrono::milliseconds limit);
  void run();
  void beat(Peer& p);

  int rank_;
  std::chrono::milliseconds limit_;
  std::vector<std::unique_ptr<Peer>> peers_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor wakes the thread
  std::thread thread_;
};

}  // namespace peregrine::dist
