#pragma once
// Where tests find data. ../shared (beside the repository root) holds real models and
// tokenizers; a test whose data is missing fails loudly instead of skipping.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace peregrine::test {

inline std::filesystem::path source_dir() { return PEREGRINE_SOURCE_DIR; }
inline std::filesystem::path binary_dir() { return PEREGRINE_BINARY_DIR; }
inline std::filesystem::path shared_dir() { return source_dir().parent_path() / "shared"; }

// Path of a file under ../shared; fails the current test (fatally) if it does not exist.
inline std::filesystem::path shared_file(const std::string& relative) {
  auto p = shared_dir() / relative;
  if (!std::filesystem::exists(p)) {
    ADD_FAILURE() << "required test data is missing: " << p
                  << " (tests read ../shared beside the repository root)";
    throw std::runtime_error("missing test data: " + p.string());
  }
  return p;
}

// A fresh scratch directory for one test's output files.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = binary_dir() / "test-scratch" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// A file's whole contents (empty if it cannot be read).
inline std::vector<std::byte> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

}  // namespace peregrine::test
