#pragma once
// Memory an execution context hands out (backend/execution_context.h): activation buffers,
// scratch and KV storage. A Buffer owns its bytes and gives them back to whoever allocated them
// (the context's `release`), so a context decides where memory lives: host heap (the CPU), pages
// it protects between its own calls (the guarded test context), device memory (a GPU).
//
// The rule that makes the seam hold: code outside the context never dereferences a Buffer's
// bytes. It passes views of them (`as<float>()`) to the context's operations and moves data
// across the seam only through the context's explicit copy calls.
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <new>
#include <span>
#include <utility>

namespace peregrine {

class Buffer {
 public:
  // Gives `data` (`bytes` long) back; called once, by the destructor.
  using Release = std::function<void(std::byte* data, size_t bytes)>;

  Buffer() = default;
  Buffer(std::byte* data, size_t bytes, Release release) : data_(data), bytes_(bytes), release_(std::move(release)) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), release_(std::move(o.release_)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      release_ = std::move(o.release_);
    }
    return *this;
  }
  ~Buffer() { reset(); }

  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  // A typed view of the whole buffer (bytes() / sizeof(T) elements): for the context's
  // operations, not for the host to read.
  template <class T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  void reset() {
    if (data_ != nullptr && release_) release_(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  Release release_;
};

// `bytes` of host heap, 64-byte aligned (a cache line; every SIMD load width), uninitialized.
// Throws std::bad_alloc.
inline Buffer host_buffer(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (bytes == 0) return {};
  void* p = ::operator new(bytes, std::align_val_t{kAlign});
  return {static_cast<std::byte*>(p), bytes,
          [](std::byte* data, size_t) { ::operator delete(data, std::align_val_t{kAlign}); }};
}

}  // namespace peregrine
