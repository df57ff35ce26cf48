#include "server/body_budget.h"

#include <utility>

namespace peregrine::server {

bool BodyBudget::take(size_t bytes) {
  size_t used = in_use_.load();
  do {
    if (bytes > capacity_ - used) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes));
  return true;
}

BodyHold::BodyHold(BodyHold&& other) noexcept
    : budget_(std::move(other.budget_)), bytes_(std::exchange(other.bytes_, 0)) {}

BodyHold& BodyHold::operator=(BodyHold&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = std::move(other.budget_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool BodyHold::grow_to(size_t bytes) {
  if (!budget_ || bytes <= bytes_) return true;
  if (!budget_->take(bytes - bytes_)) return false;
  bytes_ = bytes;
  return true;
}

void BodyHold::release() {
  if (budget_ && bytes_ > 0) budget_->give_back(bytes_);
  bytes_ = 0;
}

}  // namespace peregrine::server
