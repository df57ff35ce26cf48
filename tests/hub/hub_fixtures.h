#pragma once
// What the store and pull tests serve and lay out: two GGUFs from `peregrine synth` (tiny-llama,
// q8_0 and q4_0) and the demo model exported as a Hugging Face checkpoint folder by
// training/export_hf.py (as tests/common/hf_demo_export.h does), made once for all test processes;
// plus the environment each test points at its own caches.
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/cli_runner.h"
#include "common/hf_demo_export.h"

namespace peregrine::test {

struct HubFixtures {
  std::filesystem::path q8, q4, folder;
};

// `make(path)` writes a file or folder at `path`; the result is kept in the build tree for every
// later test process (made under a temporary name and renamed, so parallel tests never see half of
// one).
inline std::filesystem::path shared_fixture(const std::string& name,
                                            const std::function<void(const std::filesystem::path&)>& make) {
  namespace fs = std::filesystem;
  const fs::path done = binary_dir() / "test-scratch" / "hub-fixtures" / name;
  if (fs::exists(done)) return done;
  const fs::path tmp = done.string() + ".tmp" + std::to_string(::getpid());
  fs::create_directories(done.parent_path());
  fs::remove_all(tmp);
  make(tmp);
  std::error_code ec;
  fs::rename(tmp, done, ec);
  if (ec) fs::remove_all(tmp);  // another test process made it first
  return done;
}

inline const HubFixtures& hub_fixtures() {
  static const HubFixtures f = [] {
    const auto synth = [](const char* type) {
      return [type](const std::filesystem::path& out) {
        const Result r = peregrine({"synth", "--preset", "tiny-llama", "--type", type, "-o", out.string()});
        if (r.exit_code != 0) throw std::runtime_error("synth failed: " + r.err);
      };
    };
    const auto export_folder = [](const std::filesystem::path& out) {
      const std::string cmd = "python3 '" + (source_dir() / "training" / "export_hf.py").string() + "' '" +
                              demo_gguf().string() + "' '" + out.string() + "' >/dev/null";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("exporter failed: " + cmd);
    };
    return HubFixtures{shared_fixture("tiny-Q8_0.gguf", synth("q8_0")), shared_fixture("tiny-Q4_0.gguf", synth("q4_0")),
                       shared_fixture("demo-hf", export_folder)};
  }();
  return f;
}

// Sets environment variables for one test and puts the old values back after it.
class ScopedEnv {
 public:
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// The greedy tokens `peregrine run MODEL` generates (the test fails on a non-zero exit).
inline nlohmann::json greedy_tokens(const std::string& model) {
  const Result r = peregrine({"run", model, "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--json"});
  EXPECT_EQ(r.exit_code, 0) << model << ": " << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out)["tokens"] : nlohmann::json();
}

inline int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace peregrine::test
