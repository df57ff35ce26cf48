#pragma once
// Runs the real `peregrine serve` binary on a free loopback port for a test: starts it with
// --port 0, reads the ready line from its stdout for the port, keeps its stderr (the access log)
// in a file, reads its resident memory from /proc, and stops it with SIGTERM.
// PEREGRINE_SERVE_BINARY, when set, names another peregrine binary to test (for instance one
// built from an older commit, to see which tests it fails).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace peregrine::test {

class ServerProcess {
 public:
  // Extra flags after `serve --port 0`. Throws if the server does not come up.
  explicit ServerProcess(std::vector<std::string> flags) {
    const char* binary = std::getenv("PEREGRINE_SERVE_BINARY");
    std::vector<std::string> argv = {
        binary != nullptr ? std::string(binary) : std::string(PEREGRINE_BINARY_DIR) + "/peregrine", "serve", "--port",
        "0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    char log_template[] = "/tmp/peregrine-serve-stderr-XXXXXX";
    const int log_fd = mkstemp(log_template);
    if (log_fd < 0) throw std::runtime_error("mkstemp failed");
    stderr_path_ = log_template;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(log_fd, STDERR_FILENO);
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    close(log_fd);
    stdout_ = fdopen(out[0], "r");
    char line[512] = {0};
    if (fgets(line, sizeof line, stdout_) == nullptr) throw std::runtime_error("serve exited before it was ready");
    ready_line_ = line;
    const auto colon = ready_line_.rfind(':');
    port_ = std::stoi(ready_line_.substr(colon + 1));
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ != nullptr) fclose(stdout_);
    if (!stderr_path_.empty()) std::remove(stderr_path_.c_str());
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  const std::string& ready_line() const { return ready_line_; }
  pid_t pid() const { return pid_; }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(30);
    return c;
  }
  // What the server wrote to stderr so far (KV cache sizing, access log).
  std::string stderr_text() const {
    std::ifstream in(stderr_path_, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // A field of /proc/PID/status in KiB: "VmRSS" (resident now) or "VmHWM" (the peak); -1 if gone.
  long memory_kib(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
    }
    return -1;
  }
  // CPU time the server has used so far (user + system, all threads), in seconds: the work a
  // request caused, much less sensitive than wall time to other load on the machine.
  double cpu_seconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
    }
    return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  // Sends SIGTERM and waits (up to `limit`) for the exit; returns the exit status, -1 on timeout.
  int terminate(std::chrono::seconds limit = std::chrono::seconds(30)) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* stdout_ = nullptr;
  std::string stderr_path_;
  std::string ready_line_;
  int port_ = 0;
  bool exited_ = false;
};

}  // namespace peregrine::test
