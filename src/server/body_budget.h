#pragma once
// The request-body bytes the server holds at once, across all connections. A connection takes a
// body's declared length before reading any of it (chunked: what it is about to read, before it
// buffers it), and the bytes come back when the request is gone. Past the capacity the request
// is answered 503 with Retry-After, so slow or idle uploads on many connections cannot hold the
// memory of many full bodies (1 024 connections x 8 MiB would be 8 GiB). Each request's first
// kUncountedBodyBytes are not counted: small requests (nearly every one) still get through while
// large uploads hold the budget, and what they hold is bounded by the connection cap instead
// (1 024 x 64 KiB = 64 MiB).
#include <atomic>
#include <cstddef>
#include <memory>

namespace peregrine::server {

inline constexpr size_t kUncountedBodyBytes = 64 << 10;

class BodyBudget {
 public:
  explicit BodyBudget(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  size_t in_use() const { return in_use_.load(); }

 private:
  friend class BodyHold;
  bool take(size_t bytes);
  void give_back(size_t bytes) { in_use_.fetch_sub(bytes); }

  const size_t capacity_;
  std::atomic<size_t> in_use_{0};
};

// Bytes one request holds of a budget; given back when the hold goes (move-only).
class BodyHold {
 public:
  BodyHold() = default;
  explicit BodyHold(std::shared_ptr<BodyBudget> budget) : budget_(std::move(budget)) {}
  ~BodyHold() { release(); }
  BodyHold(BodyHold&& other) noexcept;
  BodyHold& operator=(BodyHold&& other) noexcept;
  BodyHold(const BodyHold&) = delete;
  BodyHold& operator=(const BodyHold&) = delete;

  // Holds `bytes` in all (never less than now); false, holding what it held, when the budget
  // cannot cover the difference. Always true without a budget.
  bool grow_to(size_t bytes);
  size_t bytes() const { return bytes_; }
  void release();

 private:
  std::shared_ptr<BodyBudget> budget_;
  size_t bytes_ = 0;
};

}  // namespace peregrine::server
