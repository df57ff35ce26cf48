#pragma once
// The threads that prepare requests (parse the JSON body, render the chat template, tokenize,
// compile a grammar), so the server's I/O threads only move bytes and one heavy request cannot
// hold /health or another client's stream. A fixed number of workers take tasks from a bounded
// queue; a task that finds the queue full is refused at once (the server answers 503 with
// Retry-After) instead of waiting without bound.
//
// Two lanes: heavy tasks (large bodies) never occupy every worker while light ones wait, and light
// tasks go first, so a burst of 8 MiB bodies delays an ordinary request by at most the light
// tasks ahead of it, not by the heavy ones.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace peregrine::server {

class WorkPool {
 public:
  // `threads` workers (>= 1) at niceness `nice` (relative to the process; 0 keeps it); at most
  // `max_waiting` tasks queued (both lanes) beyond the ones running. With more than one worker,
  // heavy tasks run on at most threads - 1 of them at a time.
  WorkPool(int threads, size_t max_waiting, int nice = 0);
  ~WorkPool();  // stop()
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `task`; false (not queued) when max_waiting tasks already wait or the pool stopped.
  // A task must not throw.
  bool try_submit(std::function<void()> task, bool heavy = false);
  // Takes no new task, runs the queued ones, and returns once every worker has finished.
  void stop();

  int threads() const { return static_cast<int>(workers_.size()); }
  size_t max_waiting() const { return max_waiting_; }

 private:
  void work();
  bool heavy_may_start() const { return !heavy_.empty() && heavy_running_ < max_heavy_running_; }

  const size_t max_waiting_;
  size_t max_heavy_running_ = 1;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> light_;
  std::deque<std::function<void()>> heavy_;
  size_t heavy_running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: they use everything above
};

}  // namespace peregrine::server
