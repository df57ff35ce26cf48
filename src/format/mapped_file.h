#pragma once
// The bytes of a whole file, read-only (RAII). Model loaders take views into it instead of
// copying tensors. Two ways to hold them:
//  - Map: a memory mapping of the file, paged in on demand, views point into the page cache;
//  - Copy: the file read once into anonymous memory advised for transparent huge pages (2 MiB).
// Decode streams every weight once per token, and with 4 KiB page-cache pages the hardware
// prefetchers stop at every page boundary: on the Zen 4 VM of docs/performance-history.md a copy in huge
// pages decodes TinyLlama Q8_0 1.3-1.5x faster (Q4_K 1.18x, Q4_0 1.1x). Auto copies files that are
// large enough to stream (>= 64 MiB) and fit in half of the available memory, and maps the rest;
// the environment variable PEREGRINE_LOAD=map|copy overrides Auto.
#include <cstddef>
#include <filesystem>
#include <span>

namespace peregrine {

enum class FileLoad { Auto, Map, Copy };

class MappedFile {
 public:
  // Opens `path` read-only. Throws FormatError("PATH: cannot open: <reason>") on failure.
  // An empty file yields an empty span (mmap of length 0 is not allowed, so nothing is mapped).
  explicit MappedFile(const std::filesystem::path& path, FileLoad load = FileLoad::Auto);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  // Whether the bytes are a copy in anonymous memory (FileLoad::Copy, or Auto's choice).
  bool copied() const { return base_ != nullptr; }

 private:
  void map(int fd, const std::filesystem::path& path);
  void copy(int fd, const std::filesystem::path& path);
  void release() noexcept;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* base_ = nullptr;  // the anonymous mapping holding a copy (data_ is 2 MiB-aligned in it)
  size_t base_size_ = 0;
};

}  // namespace peregrine
