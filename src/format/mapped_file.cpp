#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "util/error.h"

namespace peregrine {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Below this a file is not worth copying: it is read from cache, not streamed from memory.
constexpr size_t kMinCopyBytes = size_t{64} << 20;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw FormatError(path.string() + ": " + what + ": " + std::strerror(errno));
}

// MemAvailable from /proc/meminfo in bytes, 0 if unknown.
size_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

FileLoad resolve(FileLoad load, size_t size) {
  if (load != FileLoad::Auto) return load;
  if (const char* env = std::getenv("PEREGRINE_LOAD")) {
    if (std::strcmp(env, "map") == 0) return FileLoad::Map;
    if (std::strcmp(env, "copy") == 0) return FileLoad::Copy;
  }
  return size >= kMinCopyBytes && size <= available_memory() / 2 ? FileLoad::Copy : FileLoad::Map;
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, FileLoad load) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    fail(path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(path.string() + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  try {
    if (size_ > 0) resolve(load, size_) == FileLoad::Copy ? copy(fd, path) : map(fd, path);
  } catch (...) {
    ::close(fd);
    release();
    throw;
  }
  ::close(fd);  // a mapping stays valid without the descriptor
}

void MappedFile::map(int fd, const std::filesystem::path& path) {
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) fail(path, "cannot map");
  data_ = static_cast<const std::byte*>(p);
}

// Anonymous memory one huge page larger than needed, so the copy can start on a huge-page boundary
// (the kernel backs only aligned 2 MiB ranges with huge pages), read in whole, then made read-only
// like a mapping.
void MappedFile::copy(int fd, const std::filesystem::path& path) {
  const size_t rounded = (size_ + kHugePage - 1) / kHugePage * kHugePage;
  base_size_ = rounded + kHugePage;
  void* p = ::mmap(nullptr, base_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    base_size_ = 0;
    fail(path, "cannot allocate memory for a copy");
  }
  base_ = p;
  const auto aligned = (reinterpret_cast<std::uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage;
  auto* start = reinterpret_cast<std::byte*>(aligned);
  ::madvise(start, rounded, MADV_HUGEPAGE);  // advice only: without huge pages the copy still works
  for (size_t done = 0; done < size_;) {
    const ssize_t n = ::pread(fd, start + done, size_ - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path, "cannot read");
    done += static_cast<size_t>(n);
  }
  if (::mprotect(base_, base_size_, PROT_READ) != 0) fail(path, "cannot protect the copy");
  data_ = start;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      base_(std::exchange(other.base_, nullptr)),
      base_size_(std::exchange(other.base_size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    base_ = std::exchange(other.base_, nullptr);
    base_size_ = std::exchange(other.base_size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (base_ != nullptr) {
    ::munmap(base_, base_size_);
  } else if (data_ != nullptr) {
    ::munmap(const_cast<std::byte*>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
  base_ = nullptr;
  base_size_ = 0;
}

}  // namespace peregrine
