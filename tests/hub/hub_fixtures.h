#pragma once
// What the store and pull tests serve and lay out: two GGUFs from `peregrine synth` (tiny-llama,
// q8_0 and q4_0) and the demo model exported as a Hugging Face checkpoint folder
// (tests/common/hf_demo_export.h), made once per test process; plus the environment each test
// points at its own caches.
#include <cstdlib>
#include <filesystem>
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

inline const HubFixtures& hub_fixtures() {
  static const HubFixtures f = [] {
    const auto dir = scratch_dir("hub-fixtures-" + std::to_string(::getpid()));
    HubFixtures out{dir / "tiny-Q8_0.gguf", dir / "tiny-Q4_0.gguf", exported_demo("hub")};
    for (auto [type, path] : {std::pair{"q8_0", out.q8}, {"q4_0", out.q4}}) {
      const Result r = peregrine({"synth", "--preset", "tiny-llama", "--type", type, "-o", path.string()});
      if (r.exit_code != 0) throw std::runtime_error("synth failed: " + r.err);
    }
    return out;
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
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
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
