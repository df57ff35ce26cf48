#include "kernels/thread_pool.h"

#include <chrono>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace peregrine {
namespace {

// Spin this many rounds for a new job before sleeping: decode issues a parallel_for every few
// tens of microseconds, and a condition-variable wake-up costs about as much as a small matmul.
// Short, because on an oversubscribed machine a spinning worker takes time from the caller.
constexpr int kSpinRounds = 4000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

int physical_core_count() {
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < 4096; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(dir + "core_id"), package(dir + "physical_package_id");
    int core_id = -1, package_id = -1;
    if (!(core >> core_id)) break;
    if (!(package >> package_id)) package_id = 0;
    cores.emplace(package_id, core_id);
  }
  int n = static_cast<int>(cores.size());
  if (n < 1) n = static_cast<int>(std::thread::hardware_concurrency());
  return n < 1 ? 1 : n;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1) throw std::invalid_argument("ThreadPool: need at least one thread");
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

PoolStats ThreadPool::stats() const {
  return {dispatches_, tasks_, wall_ns_, busy_ns_.load(std::memory_order_relaxed),
          sleeps_.load(std::memory_order_relaxed)};
}

void ThreadPool::reset_stats() {
  dispatches_ = tasks_ = wall_ns_ = 0;
  busy_ns_.store(0, std::memory_order_relaxed);
  sleeps_.store(0, std::memory_order_relaxed);
}

void ThreadPool::work(TaskFn fn, void* ctx, int64_t n_tasks, int thread) {
  const int64_t start = now_ns();
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks) break;
    fn(ctx, task, thread);
    done_tasks_.fetch_add(1, std::memory_order_release);
  }
  busy_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  const int64_t start = now_ns();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // A worker that woke late for the previous job may still be leaving work(); it finds no task
    // there, but must be out before the counter is reset for this job.
    while (busy_workers_.load(std::memory_order_acquire) != 0) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    fn_ = fn;
    ctx_ = ctx;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    done_tasks_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work(fn, ctx, n_tasks, 0);
  // Only tasks a worker has claimed can still be running.
  int spins = 0;
  while (done_tasks_.load(std::memory_order_acquire) != n_tasks) {
    if (++spins < kSpinRounds) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  ++dispatches_;
  tasks_ += n_tasks;
  wall_ns_ += now_ns() - start;
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinRounds) {
      cpu_relax();
      ++spins;
    }
    TaskFn fn;
    void* ctx;
    int64_t n_tasks;
    if (spins == kSpinRounds) sleeps_.fetch_add(1, std::memory_order_relaxed);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      seen = generation_.load(std::memory_order_relaxed);
      if (stop_) return;
      fn = fn_;
      ctx = ctx_;
      n_tasks = n_tasks_;
      busy_workers_.fetch_add(1, std::memory_order_relaxed);
    }
    work(fn, ctx, n_tasks, thread);
    busy_workers_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace peregrine
