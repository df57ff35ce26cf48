#pragma once
// A read-only memory mapping of a whole file (RAII). Model loaders map files instead of reading
// them so multi-GB weights are paged in on demand and tensor views point straight into the page
// cache.
#include <cstddef>
#include <filesystem>
#include <span>

namespace peregrine {

class MappedFile {
 public:
  // Maps `path` read-only. Throws FormatError("PATH: cannot open: <reason>") on failure.
  // An empty file yields an empty span (mmap of length 0 is not allowed, so nothing is mapped).
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  void release() noexcept;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace peregrine
