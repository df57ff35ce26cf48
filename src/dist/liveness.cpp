#include "dist/liveness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace peregrine::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBeatInterval = std::chrono::milliseconds(200);
constexpr char kBeat = 'h', kGoodbye = 'B';
constexpr size_t kMaxAddresses = 15;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Where rank 0 listens: its port and IPv4 addresses (network order), the loopback last.
struct Where {
  uint16_t port = 0;
  uint8_t n = 0;
  std::array<uint32_t, kMaxAddresses> addresses{};
};

std::vector<uint32_t> local_addresses() {
  std::vector<uint32_t> out, loopback;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {htonl(INADDR_LOOPBACK)};
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
    const uint32_t ip = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
    ((a->ifa_flags & IFF_LOOPBACK) ? loopback : out).push_back(ip);
  }
  freeifaddrs(list);
  out.insert(out.end(), loopback.begin(), loopback.end());
  return out;
}

std::string address_text(uint32_t ip) {
  char text[INET_ADDRSTRLEN] = {0};
  in_addr a{ip};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

// Waits for `events` on fd until `deadline`; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// A connected socket to ip:port within `limit`, or -1.
int connect_to(uint32_t ip, uint16_t port, std::chrono::milliseconds limit) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = port;
  addr.sin_addr.s_addr = ip;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  int err = errno;
  if (err == EINPROGRESS && wait_for(fd, POLLOUT, Clock::now() + limit)) {
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return fd;
  }
  close(fd);
  return -1;
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Rank 0's listening socket (any address, a free port) and where it is; -1 and port 0 on failure.
int listen_anywhere(int backlog, Where& where) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  where.port = fd >= 0 ? addr.sin_port : 0;  // 0: the others learn there is nothing to connect to
  const std::vector<uint32_t> ips = local_addresses();
  where.n = static_cast<uint8_t>(std::min(ips.size(), kMaxAddresses));
  std::copy_n(ips.begin(), where.n, where.addresses.begin());
  return fd;
}

}  // namespace

Liveness::Liveness(Communicator& world, std::chrono::milliseconds silence_limit, std::chrono::milliseconds setup_limit)
    : rank_(world.rank()), limit_(silence_limit) {
  Where where;
  const int listener = rank_ == 0 ? listen_anywhere(world.size(), where) : -1;
  world.broadcast(std::as_writable_bytes(std::span<Where, 1>(&where, 1)), 0);
  // Every other rank connects to rank 0; all of them learn whether each one could.
  const int32_t ok = rank_ == 0 ? 1 : connect_to_rank0(where.addresses.data(), where.n, where.port);
  std::vector<int32_t> oks(static_cast<size_t>(world.size()));
  world.all_gather(std::as_bytes(std::span<const int32_t, 1>(&ok, 1)), std::as_writable_bytes(std::span<int32_t>(oks)));
  for (int r = 1; r < world.size(); ++r) {
    if (oks[r] != 0) continue;
    if (listener >= 0) close(listener);
    std::string tried;
    for (int i = 0; i < where.n; ++i) tried += (i ? ", " : "") + address_text(where.addresses[i]);
    throw CommError("rank " + std::to_string(r) + " cannot reach rank 0's heartbeat port " +
                    std::to_string(ntohs(where.port)) + " at any of its addresses (" + tried +
                    "): allow TCP between the hosts");
  }
  if (rank_ == 0) {
    const bool accepted = accept_peers(listener, world.size() - 1, setup_limit);
    close(listener);
    if (!accepted) throw CommError("a rank did not open its heartbeat connection to rank 0");
  }
  for (auto& p : peers_) {
    tune(p->fd);
    p->last_heard_ns = now_ns();
  }
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw CommError("heartbeats: pipe failed");
  // The thread takes no signals: a command waiting for SIGTERM with sigwait (serve) must get it.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

bool Liveness::connect_to_rank0(const uint32_t* addresses, int n, uint16_t port) {
  auto p = std::make_unique<Peer>();
  p->rank = 0;
  for (int i = 0; i < n && p->fd < 0 && port != 0; ++i) {
    p->fd = connect_to(addresses[i], port, std::chrono::milliseconds(2000));
    if (p->fd >= 0) p->address = address_text(addresses[i]);
  }
  const int32_t me = rank_;
  if (p->fd < 0 || send(p->fd, &me, sizeof me, MSG_NOSIGNAL) != sizeof me) {
    if (p->fd >= 0) close(p->fd);
    return false;
  }
  peers_.push_back(std::move(p));
  return true;
}

bool Liveness::accept_peers(int listener, int n, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (int i = 0; i < n; ++i) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    int fd = -1;
    int32_t who = -1;
    if (wait_for(listener, POLLIN, deadline))
      fd = accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0 || !wait_for(fd, POLLIN, deadline) || recv(fd, &who, sizeof who, MSG_WAITALL) != sizeof who) {
      if (fd >= 0) close(fd);
      return false;
    }
    auto p = std::make_unique<Peer>();
    p->rank = who;
    p->fd = fd;
    p->address = address_text(from.sin_addr.s_addr);
    peers_.push_back(std::move(p));
  }
  return true;
}

Liveness::~Liveness() {
  for (auto& p : peers_) {
    if (p->fd >= 0) (void)send(p->fd, &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  const char stop = 1;
  (void)write(wake_[1], &stop, 1);
  if (thread_.joinable()) thread_.join();
  for (auto& p : peers_) {
    if (p->fd >= 0) close(p->fd);
  }
  close(wake_[0]);
  close(wake_[1]);
}

void Liveness::beat(Peer& p) {
  // A full send buffer (the link is down) skips the beat: the peer's silence is what it notices.
  (void)send(p.fd, &kBeat, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Liveness::run() {
  std::vector<pollfd> fds;
  auto next_beat = Clock::now();
  while (true) {
    const auto now = Clock::now();
    if (now >= next_beat) {
      for (auto& p : peers_) {
        if (!p->closed && !p->left) beat(*p);
      }
      next_beat = now + kBeatInterval;
    }
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    for (auto& p : peers_) fds.push_back({p->closed || p->left ? -1 : p->fd, POLLIN, 0});
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - now).count() + 1;
    if (poll(fds.data(), fds.size(), static_cast<int>(wait)) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Peer& p = *peers_[i];
      char buf[256];
      const ssize_t n = recv(p.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        p.last_heard_ns = now_ns();
        if (std::memchr(buf, kGoodbye, static_cast<size_t>(n)) != nullptr) p.left = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        p.closed = true;
      }
    }
  }
}

std::optional<std::string> Liveness::problem() const {
  const int64_t now = now_ns();
  for (const auto& p : peers_) {
    if (p->left) continue;
    const std::string who = "rank " + std::to_string(p->rank) + " (at " + p->address + ")";
    if (p->closed) return who + " closed its heartbeat connection: its process ended (killed or crashed)";
    const double silent_s = static_cast<double>(now - p->last_heard_ns.load()) * 1e-9;
    if (silent_s > std::chrono::duration<double>(limit_).count()) {
      char text[200];
      std::snprintf(text, sizeof text,
                    " sent no heartbeat for %.1f s (limit %.1f s): dead or hung (frozen, or its host unreachable)",
                    silent_s, std::chrono::duration<double>(limit_).count());
      return who + text;
    }
  }
  return std::nullopt;
}

void Liveness::check() const {
  if (auto p = problem()) throw CommError(*p);
}

}  // namespace peregrine::dist
