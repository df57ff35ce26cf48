#pragma once
// The demo target model (models/demo-target.gguf) exported as a Hugging Face checkpoint folder by
// the project's own exporter, training/export_hf.py (python3, standard library only), into this
// test process's scratch space in the build tree.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "common/test_paths.h"

namespace peregrine::test {

inline std::filesystem::path demo_gguf() { return source_dir() / "models" / "demo-target.gguf"; }

// `name` tells folders apart; `args` go to the exporter (e.g. "--dtype bf16 --shards 3").
inline std::filesystem::path exported_demo(const std::string& name, const std::string& args = "") {
  const auto dir = binary_dir() / "test-scratch" / "hf-demo" / (name + "-" + std::to_string(::getpid()));
  if (!std::filesystem::exists(dir / "config.json")) {
    const std::string cmd = "python3 '" + (source_dir() / "training" / "export_hf.py").string() + "' '" +
                            demo_gguf().string() + "' '" + dir.string() + "' " + args;
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("exporter failed: " + cmd);
  }
  return dir;
}

}  // namespace peregrine::test
