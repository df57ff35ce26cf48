#pragma once
// The threads that prepare requests (parse the JSON body, render the chat template, tokenize,
// compile a grammar), so the server's I/O threads only move bytes and one heavy request cannot
// hold /health or another client's stream. A fixed number of workers take tasks in arrival order
// from a bounded queue; a task that finds the queue full is refused at once (the server answers
// 503 with Retry-After) instead of waiting without bound.
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
  // `max_waiting` tasks queued beyond the ones running.
  WorkPool(int threads, size_t max_waiting, int nice = 0);
  ~WorkPool();  // stop()
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `task`; false (not queued) when max_waiting tasks already wait or the pool stopped.
  // A task must not throw.
  bool try_submit(std::function<void()> task);
  // Takes no new task, runs the queued ones, and returns once every worker has finished.
  void stop();

  int threads() const { return static_cast<int>(workers_.size()); }
  size_t max_waiting() const { return max_waiting_; }

 private:
  void work();

  const size_t max_waiting_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: they use everything above
};

}  // namespace peregrine::server
