#pragma once
// A persistent pool of worker threads for data-parallel kernels. Threads are created once; each
// parallel_for wakes them, hands out task indices from an atomic counter, and waits until every
// task has run. Nothing is allocated per call, so the decode loop allocates nothing. The caller
// never waits for a worker that has not woken up yet: on a loaded machine it simply runs the
// remaining tasks itself.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace peregrine {

// Physical cores of this machine (distinct (package, core id) pairs from sysfs), falling back to
// std::thread::hardware_concurrency(), and at least 1.
int physical_core_count();

// What the pool has done since construction (or reset_stats): for measuring what a decode step
// pays for its synchronizations (docs/performance-history.md, "Decode synchronizations").
struct PoolStats {
  int64_t dispatches = 0;  // parallel_for calls that woke the workers (single-task calls excluded)
  int64_t tasks = 0;       // tasks those calls ran
  int64_t wall_ns = 0;     // summed over dispatches: from the caller's start to the last task's end
  int64_t busy_ns = 0;     // summed over threads and dispatches: from joining a call to finding no task
  int64_t sleeps = 0;      // times a worker stopped spinning and slept until the next call (a futex wake-up)
};

class ThreadPool {
 public:
  // n_threads counts the calling thread, which works too: ThreadPool(1) starts no thread.
  // Throws std::invalid_argument for n_threads < 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Counted by the calling thread; busy_ns also by the workers, complete once no call is running.
  PoolStats stats() const;
  void reset_stats();

  // Calls fn(task, thread) for every task in [0, n_tasks), thread in [0, size()) naming the
  // thread that runs it (for per-thread scratch). Returns when all tasks are done. Which thread
  // runs which task varies from call to call, so tasks must write disjoint outputs and compute
  // them in a way that does not depend on the thread. One call at a time; fn must not throw.
  template <class Fn>
  void parallel_for(int64_t n_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  void run(int64_t n_tasks, TaskFn fn, void* ctx);
  void worker_loop(int thread);
  void work(TaskFn fn, void* ctx, int64_t n_tasks, int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  // The current job; written under mutex_ before generation_ is bumped.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int64_t> done_tasks_{0};
  // Workers inside work() for the current job; only incremented under mutex_, so run() can wait
  // for 0 under the lock before it resets the task counter for the next job.
  std::atomic<int> busy_workers_{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  // Statistics (stats()): the caller's counts, and the workers' busy time.
  int64_t dispatches_ = 0, tasks_ = 0, wall_ns_ = 0;
  std::atomic<int64_t> busy_ns_{0}, sleeps_{0};
};

}  // namespace peregrine
