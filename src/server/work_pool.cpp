#include "server/work_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace peregrine::server {

WorkPool::WorkPool(int threads, size_t max_waiting, int nice) : max_waiting_(max_waiting) {
  const int n = std::max(1, threads);
  max_heavy_running_ = static_cast<size_t>(std::max(1, n - 1));
  for (int i = 0; i < n; ++i) {
    workers_.emplace_back([this, nice] {
      // Lower priority than the engine and I/O threads: where the cores are short, preparing
      // requests waits, streams do not (failure leaves the thread at the process's priority).
      if (nice > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
      work();
    });
  }
}

WorkPool::~WorkPool() { stop(); }

bool WorkPool::try_submit(std::function<void()> task, bool heavy) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || light_.size() + heavy_.size() >= max_waiting_) return false;
    (heavy ? heavy_ : light_).push_back(std::move(task));
  }
  ready_.notify_all();  // a worker that may take this lane, whichever it is
  return true;
}

void WorkPool::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void WorkPool::work() {
  while (true) {
    std::function<void()> task;
    bool heavy = false;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return !light_.empty() || heavy_may_start() || (stopping_ && heavy_.empty()); });
      if (!light_.empty()) {
        task = std::move(light_.front());
        light_.pop_front();
      } else if (heavy_may_start()) {
        task = std::move(heavy_.front());
        heavy_.pop_front();
        heavy = true;
        ++heavy_running_;
      } else {
        return;  // stopping, and nothing left to run
      }
    }
    task();
    if (heavy) {
      {
        std::lock_guard lock(mu_);
        --heavy_running_;
      }
      ready_.notify_all();  // a waiting heavy task may start now
    }
  }
}

}  // namespace peregrine::server
