#include "server/live_feed.h"

#include <vector>

namespace peregrine::server {

LiveFeed::LiveFeed() : thread_([this] { loop(); }) {}

LiveFeed::~LiveFeed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<uint64_t> LiveFeed::join(Wakeup wakeup) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(viewers_.size()) >= kMaxViewers) return std::nullopt;
  const uint64_t id = next_++;
  viewers_.emplace(id, std::move(wakeup));
  cv_.notify_all();
  return id;
}

void LiveFeed::leave(uint64_t viewer) {
  std::lock_guard<std::mutex> lock(mu_);
  viewers_.erase(viewer);
}

void LiveFeed::wake_all() {
  std::vector<Wakeup> wakeups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, w] : viewers_) wakeups.push_back(w);
  }
  for (const Wakeup& w : wakeups) w();
}

void LiveFeed::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait(lock, [&] { return stopping_ || !viewers_.empty(); });
    if (stopping_) return;
    lock.unlock();
    wake_all();  // a wake-up only posts to the viewer's connection, which builds the frame
    lock.lock();
    cv_.wait_for(lock, kInterval, [&] { return stopping_; });
  }
}

}  // namespace peregrine::server
