#pragma once
// Runs the real `peregrine` binary for the CLI tests, capturing stdout, stderr and the exit code.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_paths.h"

namespace peregrine::test {

struct Result {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `peregrine ARGS...`, capturing stdout and stderr separately.
inline Result peregrine(const std::vector<std::string>& args) {
  static int counter = 0;
  auto dir = binary_dir() / "test-scratch" / "cli-io";
  std::filesystem::create_directories(dir);
  // ctest runs each test in its own process, several at once: the pid keeps their files apart.
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(counter++);
  auto out = dir / ("out" + tag + ".txt");
  auto err = dir / ("err" + tag + ".txt");
  std::string cmd = quote((binary_dir() / "peregrine").string());
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out.string()) + " 2>" + quote(err.string()) + " </dev/null";
  int status = std::system(cmd.c_str());
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return {code, slurp(out), slurp(err)};
}

}  // namespace peregrine::test
