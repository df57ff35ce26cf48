#pragma once
// Runs the real `peregrine serve` binary on a free loopback port for a test: starts it with
// --port 0, reads the ready line from its stdout for the port, and stops it with SIGTERM.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace peregrine::test {

class ServerProcess {
 public:
  // Extra flags after `serve --port 0`. Throws if the server does not come up.
  explicit ServerProcess(std::vector<std::string> flags) {
    std::vector<std::string> argv = {std::string(PEREGRINE_BINARY_DIR) + "/peregrine", "serve", "--port", "0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
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
  std::string ready_line_;
  int port_ = 0;
  bool exited_ = false;
};

}  // namespace peregrine::test
