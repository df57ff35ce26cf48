#pragma once
// The across-host tests' cluster (scripts/netns-cluster.sh): hosts as network namespaces, mpirun
// into them over TCP, a server on rank 0 reached from inside host 1's namespace, and the streams a
// client reads from it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_runner.h"
#include "common/test_paths.h"

namespace peregrine::test {

using Clock = std::chrono::steady_clock;

inline std::string cluster_script() { return (source_dir() / "scripts" / "netns-cluster.sh").string(); }

class NetnsCluster {
 public:
  // `tag`: a letter or two telling this binary's clusters apart; `options`: --rate/--delay/--loss.
  // Sets why_not (and returns nullptr) where this machine cannot make one (not root, no iproute2,
  // no network namespaces).
  static std::unique_ptr<NetnsCluster> make(const std::string& tag, int hosts, const std::string& options,
                                            std::string& why_not) {
    const Result check = run_script("check");
    if (check.exit_code != 0) {
      why_not = check.err.empty() ? "scripts/netns-cluster.sh check failed" : check.err;
      return nullptr;
    }
    auto c = std::unique_ptr<NetnsCluster>(new NetnsCluster);
    c->name_ = tag + std::to_string(::getpid());
    const Result up = run_script("up " + std::to_string(hosts) + " --name " + c->name_ + " " + options);
    if (up.exit_code != 0) {
      why_not = "netns-cluster.sh up failed: " + up.err;
      return nullptr;
    }
    c->dir_ = up.out.substr(0, up.out.find('\n'));
    return c;
  }
  ~NetnsCluster() { run_script("down " + name_); }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const std::string& name() const { return name_; }
  std::string host(int i) const { return name_ + "-h" + std::to_string(i); }
  // The launcher: `mpirun -np N` with one rank per host, over TCP.
  std::string mpirun(int np) const { return (dir_ / "mpirun").string() + " -np " + std::to_string(np); }
  // Takes host i's link down or brings it back (at the switch).
  void link(int i, bool up) const { run_script("link " + name_ + " " + std::to_string(i) + (up ? " up" : " down")); }
  // A TCP connection to 127.0.0.1:port inside host i's namespace (-1 if refused).
  int connect_local(int i, int port) const {
    int fd = -1;
    std::thread([&] {
      const int ns = open(("/run/netns/" + host(i)).c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) return;  // only this thread changes namespace
      close(ns);
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        fd = -1;
      }
    }).join();
    return fd;
  }

 private:
  NetnsCluster() = default;
  static Result run_script(const std::string& args) {
    static int counter = 0;
    const auto dir = binary_dir() / "test-scratch" / "netns";
    std::filesystem::create_directories(dir);
    const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const auto out = dir / ("out" + tag), err = dir / ("err" + tag);
    const std::string cmd = "PEREGRINE_NETNS_SWITCH=" + quote((binary_dir() / "tests/dist/netns_switch").string()) +
                            " bash " + quote(cluster_script()) + " " + args + " >" + quote(out.string()) + " 2>" +
                            quote(err.string()) + " </dev/null";
    const int status = std::system(cmd.c_str());
    Result r{WIFEXITED(status) ? WEXITSTATUS(status) : 128, slurp(out), slurp(err)};
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
  }
  std::string name_;
  std::filesystem::path dir_;
};

// `mpirun ... peregrine ARGS` on the cluster, to the end, with stdout and stderr captured.
inline Result cluster_run(const NetnsCluster& c, int np, const std::vector<std::string>& args, int limit_s = 120) {
  static int counter = 0;
  const auto dir = binary_dir() / "test-scratch" / "netns";
  std::filesystem::create_directories(dir);
  const std::string tag = std::to_string(::getpid()) + "-r" + std::to_string(counter++);
  const auto out = dir / ("out" + tag), err = dir / ("err" + tag);
  std::string cmd = "timeout -k 5 " + std::to_string(limit_s) + " " + c.mpirun(np) + " " +
                    quote((binary_dir() / "peregrine").string());
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out.string()) + " 2>" + quote(err.string()) + " </dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, slurp(out), slurp(err)};
}

// `peregrine serve` on the cluster (rank 0 on host 1, listening on its loopback), each rank's pid
// in a file, until stop() or the end of the test.
class ClusterServer {
 public:
  // `mpirun_extra`: flags for mpirun itself.
  ClusterServer(const NetnsCluster& c, int np, const std::vector<std::string>& args, int limit_s = 150,
                const std::string& mpirun_extra = "")
      : cluster_(c), np_(np) {
    static int counter = 0;
    dir_ = scratch_dir("netns-serve-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::string inner = "echo $$ > " + dir_.string() + "/pid.$OMPI_COMM_WORLD_RANK; exec " +
                        quote((binary_dir() / "peregrine").string()) + " serve --port 0 --no-webui";
    for (const auto& a : args) inner += " " + quote(a);
    const std::string cmd = "exec timeout -k 5 " + std::to_string(limit_s) + " " + c.mpirun(np) + mpirun_extra +
                            " sh -c " + quote(inner) + " >" + quote((dir_ / "out").string()) + " 2>" +
                            quote((dir_ / "err").string()) + " </dev/null";
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(90);
    while (Clock::now() < deadline && port_ == 0 && running()) {
      const std::string out = slurp(dir_ / "out");
      if (const auto at = out.find("on http://127.0.0.1:");
          at != std::string::npos && out.find('\n', at) != std::string::npos) {
        port_ = std::stoi(out.substr(at + 20));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ClusterServer() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGTERM);
      wait_exit(std::chrono::seconds(20));
    }
  }
  int port() const { return port_; }
  bool running() {
    if (exit_code_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    return true;
  }
  // mpirun's exit code once it ended within `limit` (nullopt: still running).
  std::optional<int> wait_exit(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return exit_code_;
  }
  pid_t rank_pid(int rank) const {
    std::ifstream in(dir_ / ("pid." + std::to_string(rank)));
    pid_t pid = 0;
    return in >> pid ? pid : -1;
  }
  // Ranks whose process still exists (zombies aside).
  std::vector<int> ranks_alive() const {
    std::vector<int> alive;
    for (int r = 0; r < np_; ++r) {
      const pid_t p = rank_pid(r);
      if (p <= 0) continue;
      std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
      std::string line;
      if (std::getline(stat, line) && line.find(") Z ") == std::string::npos) alive.push_back(r);
    }
    return alive;
  }
  std::string err() const { return slurp(dir_ / "err"); }

 private:
  const NetnsCluster& cluster_;
  int np_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<int> exit_code_;
};

// One HTTP exchange on a connection inside host 1: the request, then everything until the server
// closes (or `limit` passes).
struct HttpExchange {
  int status = 0;
  std::string body;
  bool timed_out = false;
};

inline HttpExchange http_exchange(const NetnsCluster& c, int port, const std::string& method, const std::string& path,
                                  const std::string& body, std::chrono::milliseconds limit,
                                  const std::function<void(const std::string&)>& on_data = {}) {
  HttpExchange x;
  const int fd = c.connect_local(1, port);
  if (fd < 0) return x;
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" +
                          "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string all;
  const auto deadline = Clock::now() + limit;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      x.timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[8192];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
    if (on_data) on_data(all);
  }
  close(fd);
  if (all.rfind("HTTP/1.1 ", 0) == 0) x.status = std::stoi(all.substr(9, 3));
  const auto head_end = all.find("\r\n\r\n");
  x.body = head_end == std::string::npos ? "" : all.substr(head_end + 4);
  return x;
}

// A streamed completion, read to its end: the tokens' text, the finish reason, any error event.
struct StreamResult {
  int status = 0;
  std::string text, finish_reason, error;
  int chunks = 0;
  bool done = false;  // [DONE] arrived
  bool timed_out = false;
};

inline StreamResult parse_stream(const HttpExchange& x) {
  StreamResult s;
  s.status = x.status;
  s.timed_out = x.timed_out;
  for (size_t at = x.body.find("data: "); at != std::string::npos; at = x.body.find("data: ", at + 6)) {
    const std::string line = x.body.substr(at + 6, x.body.find('\n', at) - at - 6);
    if (line.rfind("[DONE]", 0) == 0) {
      s.done = true;
      continue;
    }
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("error")) {
      s.error = j["error"].value("message", "");
      continue;
    }
    ++s.chunks;
    for (const auto& ch : j.value("choices", nlohmann::json::array())) {
      s.text += ch.value("text", "");
      if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) s.finish_reason = ch["finish_reason"];
    }
  }
  return s;
}

inline std::string completion_body(const std::string& prompt, int max_tokens, bool stream) {
  return nlohmann::json{{"model", "stories260K"}, {"prompt", prompt},   {"max_tokens", max_tokens},
                        {"temperature", 0},       {"ignore_eos", true}, {"stream", stream}}
      .dump();
}

// Streams `body` from /v1/completions; `on_chunks(n)` sees how many data events arrived so far.
inline StreamResult stream_completion(const NetnsCluster& c, int port, const std::string& body,
                                      std::chrono::seconds limit, const std::function<void(size_t)>& on_events = {}) {
  return parse_stream(http_exchange(c, port, "POST", "/v1/completions", body, limit, [&](const std::string& all) {
    if (!on_events) return;
    size_t n = 0;
    for (size_t at = all.find("data: "); at != std::string::npos; at = all.find("data: ", at + 6)) ++n;
    on_events(n);
  }));
}

}  // namespace peregrine::test
