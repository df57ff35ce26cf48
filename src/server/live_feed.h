#pragma once
// Wakes the live view's viewers (GET /v1/engine/events) a few times a second from one thread:
// each wake-up makes a viewer's connection poll it for a frame. At most kMaxViewers at once, so
// watching costs a bounded share of the server; the thread sleeps while nobody watches.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "server/http_handler.h"

namespace peregrine::server {

class LiveFeed {
 public:
  static constexpr int64_t kMaxViewers = 8;
  static constexpr std::chrono::milliseconds kInterval{250};

  LiveFeed();
  ~LiveFeed();  // stops the thread
  LiveFeed(const LiveFeed&) = delete;
  LiveFeed& operator=(const LiveFeed&) = delete;

  // A new viewer to wake every kInterval; nullopt when kMaxViewers are watching already.
  std::optional<uint64_t> join(Wakeup wakeup);
  void leave(uint64_t viewer);
  // Wakes every viewer now (the server is stopping: their streams end).
  void wake_all();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Wakeup> viewers_;
  uint64_t next_ = 1;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace peregrine::server
