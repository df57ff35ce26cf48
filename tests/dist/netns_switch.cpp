// A learning Ethernet switch in user space with a latency and a loss rate, for the test cluster of
// scripts/netns-cluster.sh (its kernels have no netem). It runs in the cluster's switch namespace
// over the switch ends of the hosts' veth pairs:
//
//   netns_switch --delay-ms MS --loss PCT p1 p2 ...
//
// Every frame that arrives on a port waits MS milliseconds (the one-way latency of the host's link:
// netem's "delay MS" on each host's egress gives the same round trip, 2 x MS), is dropped with
// probability PCT/100, and goes out on the port that last sent from its destination address (every
// other port while unknown). The sockets carry virtio-net headers (PACKET_VNET_HDR), so the
// kernel's large segments and partial checksums pass through untouched, as through a bridge.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point due;
  int from;
  std::vector<unsigned char> bytes;  // virtio-net header + Ethernet frame
};

int open_port(const std::string& name) {
  const int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) {
    std::perror("netns_switch: socket(AF_PACKET)");
    std::exit(1);
  }
  int one = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) std::perror("PACKET_VNET_HDR");
  // The frames this socket sends must not come back to it as received ones.
  setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
  int buf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf);
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (addr.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "netns_switch: cannot bind to %s\n", name.c_str());
    std::exit(1);
  }
  return fd;
}

using Mac = std::array<unsigned char, 6>;

Mac mac_at(const std::vector<unsigned char>& f, size_t offset) {
  Mac m;
  std::memcpy(m.data(), f.data() + offset, 6);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  double delay_ms = 0, loss = 0;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--delay-ms" && i + 1 < argc) {
      delay_ms = std::atof(argv[++i]);
    } else if (a == "--loss" && i + 1 < argc) {
      loss = std::atof(argv[++i]) / 100.0;
    } else {
      names.push_back(a);
    }
  }
  if (names.size() < 2) {
    std::fprintf(stderr, "usage: netns_switch [--delay-ms MS] [--loss PCT] PORT PORT...\n");
    return 2;
  }
  std::vector<pollfd> fds;
  for (const auto& n : names) fds.push_back({open_port(n), POLLIN, 0});
  const auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(delay_ms));
  const size_t header = 10;  // sizeof(struct virtio_net_hdr) (<linux/virtio_net.h> is C only)
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::deque<Frame> queue;  // the delay is the same for every frame: first in, first due
  std::vector<std::vector<unsigned char>> spare;
  std::map<Mac, int> where;  // source address -> the port it was last seen on
  std::fprintf(stderr, "netns_switch: %zu ports, delay %.3f ms, loss %.1f%%\n", names.size(), delay_ms, loss * 100);
  while (true) {
    // ppoll waits to the microsecond (poll's milliseconds would round short delays up).
    timespec wait_for{}, *timeout = nullptr;
    if (!queue.empty()) {
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(queue.front().due - Clock::now());
      const int64_t ns = std::max<int64_t>(0, wait.count());
      wait_for = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      timeout = &wait_for;
    }
    if (ppoll(fds.data(), fds.size(), timeout, nullptr) < 0) continue;
    for (size_t p = 0; p < fds.size(); ++p) {
      if (!(fds[p].revents & POLLIN)) continue;
      for (int burst = 0; burst < 64; ++burst) {
        std::vector<unsigned char> bytes;
        if (!spare.empty()) {
          bytes = std::move(spare.back());
          spare.pop_back();
        }
        bytes.resize(header + 65536 + 64);
        const ssize_t n = recv(fds[p].fd, bytes.data(), bytes.size(), MSG_DONTWAIT);
        if (n <= 0) {
          spare.push_back(std::move(bytes));
          break;
        }
        bytes.resize(static_cast<size_t>(n));
        if (static_cast<size_t>(n) < header + 14 || (loss > 0 && uniform(rng) < loss)) {
          spare.push_back(std::move(bytes));
          continue;
        }
        where[mac_at(bytes, header + 6)] = static_cast<int>(p);
        queue.push_back({Clock::now() + delay, static_cast<int>(p), std::move(bytes)});
      }
    }
    const auto now = Clock::now();
    while (!queue.empty() && queue.front().due <= now) {
      Frame& f = queue.front();
      const Mac dest = mac_at(f.bytes, header);
      const auto known = where.find(dest);
      for (size_t p = 0; p < fds.size(); ++p) {
        if (static_cast<int>(p) == f.from) continue;
        if (known != where.end() && known->second != static_cast<int>(p)) continue;
        // A full send buffer (or a port that is down) loses the frame, as a switch would.
        (void)send(fds[p].fd, f.bytes.data(), f.bytes.size(), MSG_DONTWAIT);
      }
      spare.push_back(std::move(f.bytes));
      queue.pop_front();
    }
  }
}
