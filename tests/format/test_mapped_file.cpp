// A file's bytes held two ways, mapped and copied into huge-page-advised memory: the same bytes,
// the copy aligned to a huge page, the environment's override obeyed, errors unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "common/test_paths.h"
#include "format/mapped_file.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::filesystem::path write_random_file(const std::string& name, size_t size) {
  const auto path = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::vector<char> bytes(size);
  std::mt19937 rng(7);
  for (char& b : bytes) b = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST(MappedFile, MapAndCopyHoldTheSameBytes) {
  // Past one huge page and not a multiple of it, so the copy's rounding and tail are exercised.
  const auto path = write_random_file("peregrine-mapped-file", (size_t{5} << 20) + 12345);
  const std::vector<std::byte> want = test::file_bytes(path);
  const MappedFile mapped(path, FileLoad::Map);
  MappedFile copied(path, FileLoad::Copy);
  EXPECT_FALSE(mapped.copied());
  EXPECT_TRUE(copied.copied());
  for (const MappedFile* f : {&mapped, static_cast<const MappedFile*>(&copied)}) {
    ASSERT_EQ(f->size(), want.size());
    EXPECT_EQ(std::memcmp(f->bytes().data(), want.data(), want.size()), 0);
  }
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copied.bytes().data()) % (size_t{2} << 20), 0u)
      << "the copy starts on a huge page";
  MappedFile moved(std::move(copied));
  EXPECT_EQ(std::memcmp(moved.bytes().data(), want.data(), want.size()), 0);
  std::filesystem::remove(path);
}

TEST(MappedFile, TheEnvironmentOverridesAuto) {
  const auto path = write_random_file("peregrine-mapped-file-env", 4096);
  ::setenv("PEREGRINE_LOAD", "copy", 1);
  EXPECT_TRUE(MappedFile(path).copied());
  ::setenv("PEREGRINE_LOAD", "map", 1);
  EXPECT_FALSE(MappedFile(path).copied());
  ::unsetenv("PEREGRINE_LOAD");
  EXPECT_FALSE(MappedFile(path).copied()) << "a small file is mapped";
  EXPECT_EQ(MappedFile(path, FileLoad::Copy).bytes().size(), 4096u);
  std::filesystem::remove(path);
}

TEST(MappedFile, EmptyAndMissingFiles) {
  const auto path = write_random_file("peregrine-mapped-file-empty", 0);
  for (FileLoad load : {FileLoad::Map, FileLoad::Copy}) {
    const MappedFile f(path, load);
    EXPECT_EQ(f.size(), 0u);
    EXPECT_TRUE(f.bytes().empty());
    EXPECT_THROW(MappedFile(path.string() + ".missing", load), FormatError);
    EXPECT_THROW(MappedFile(std::filesystem::temp_directory_path(), load), FormatError);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace peregrine
