#include "server/work_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace peregrine::server {

WorkPool::WorkPool(int threads, size_t max_waiting, int nice) : max_waiting_(max_waiting) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    workers_.emplace_back([this, nice] {
      // Lower priority than the engine and I/O threads: where the cores are short, preparing
      // requests waits, streams do not (failure leaves the thread at the process's priority).
      if (nice > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
      work();
    });
  }
}

WorkPool::~WorkPool() { stop(); }

bool WorkPool::try_submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_waiting_) return false;
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
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
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace peregrine::server
