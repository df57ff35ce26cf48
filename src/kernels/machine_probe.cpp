#include "kernels/machine_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>

#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/simd_avx512.h"
#include "kernels/x86/simd_avx512_bf16.h"

namespace peregrine {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Sums 64-bit words with eight independent accumulators (integer adds are associative, so the
// compiler vectorizes this at baseline ISA; the loop is load-bound either way). The inner loop
// is unrolled so the accumulators stay in registers: rolled, they live on the stack and the
// probe measures store-to-load forwarding instead of memory (the FMA probe's old bug).
uint64_t sum_words(const uint64_t* p, int64_t n) {
  uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  }
  uint64_t s = 0;
  for (uint64_t a : acc) s += a;
  return s;
}

// The same sum over `streams` interleaved pieces of [p, p + n): each step reads the next 8 words
// of every piece, so several sequential streams are in flight at once.
uint64_t sum_streams(const uint64_t* p, int64_t n, int streams) {
  const int64_t piece = n / streams / 8 * 8;
  uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < piece; i += 8) {
    for (int s = 0; s < streams; ++s) {
      const uint64_t* q = p + s * piece + i;
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) acc[j] += q[j];
    }
  }
  uint64_t total = sum_words(p + streams * piece, n - streams * piece);  // the ragged tail
  for (uint64_t a : acc) total += a;
  return total;
}

// The CPUs this process may run on, in order (empty if the system will not say).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Pins the calling thread to `cpu`; the probe still runs if the system refuses.
void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

float scalar_fma_loop(int64_t iters) {
  float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 8
    for (float& a : acc) a = a * 0.9999f + 1e-4f;
  }
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

// Runs body(t) on n dedicated threads that start together, and returns the wall time from the
// common start to the last finish. The probes use their own threads rather than the pool's
// parallel_for: the pool lets the calling thread take tasks a sleeping worker has not picked up
// yet (right for kernels), which here could leave a core idle and halve the measured bound.
template <typename Body>
double run_on_all_threads(int n, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<double> finish(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      body(t);
      finish[static_cast<size_t>(t)] = now_s();
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  const double t0 = now_s();
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  return *std::max_element(finish.begin(), finish.end()) - t0;
}

}  // namespace

BandwidthProbe probe_read_bandwidth(ThreadPool& pool, int64_t bytes, int reps, int streams) {
  const int64_t words = bytes / 8;
  auto buf = std::make_unique<uint64_t[]>(static_cast<size_t>(words));
  const int n_threads = pool.size();
  // One CPU per thread when there are enough; otherwise the scheduler places them.
  const std::vector<int> cpus = allowed_cpus();
  const bool pin = static_cast<int>(cpus.size()) >= n_threads;
  auto range = [&](int t) { return std::pair{words * t / n_threads, words * (t + 1) / n_threads}; };
  // Touch every page from the thread that will read it (first-touch placement).
  run_on_all_threads(n_threads, [&](int t) {
    if (pin) pin_to(cpus[static_cast<size_t>(t)]);
    const auto [b, e] = range(t);
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  });
  std::atomic<uint64_t> sink{0};
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const double seconds = run_on_all_threads(n_threads, [&](int t) {
      if (pin) pin_to(cpus[static_cast<size_t>(t)]);
      const auto [b, e] = range(t);
      sink.fetch_add(sum_streams(buf.get() + b, e - b, std::max(1, streams)), std::memory_order_relaxed);
    });
    rates.push_back(static_cast<double>(words * 8) / seconds);
  }
  std::sort(rates.begin(), rates.end());
  BandwidthProbe p;
  p.passes = static_cast<int>(rates.size());
  if (rates.empty()) return p;
  p.worst = rates.front();
  p.best = rates.back();
  p.median = rates[rates.size() / 2];
  if (sink.load() == 42) p.best += 0;  // keeps the sums observable
  return p;
}

double measure_read_bandwidth(ThreadPool& pool, int64_t bytes, int reps) {
  return probe_read_bandwidth(pool, bytes, reps).best;
}

namespace {
// The best rate (work per second, all threads together) over `reps` runs of `loop` on every
// thread, each thread doing `work_per_thread`. The loop's result goes into a sink the compiler
// cannot drop, so the arithmetic is not optimized away.
template <class Loop>
double best_rate(ThreadPool& pool, int reps, double work_per_thread, Loop loop) {
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double seconds = run_on_all_threads(pool.size(), [&](int) {
      const auto v = loop();
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof(v) < sizeof(bits) ? sizeof(v) : sizeof(bits));
      sink.fetch_add(bits, std::memory_order_relaxed);
    });
    best = std::max(best, work_per_thread * pool.size() / seconds);
  }
  if (sink.load() == 42) best += 0;
  return best;
}
}  // namespace

double measure_peak_flops(ThreadPool& pool, Isa isa, int reps) {
  // Per path: the loop, its iterations and its flops per iteration; a few milliseconds each, so
  // that the best of the runs finds a quiet moment on a loaded machine.
  const int64_t iters = isa == Isa::Avx2 ? 2'000'000 : 1'000'000;
  const double flops_per_iter = isa == Isa::Avx512 ? 384.0 : isa == Isa::Avx2 ? 160.0 : 16.0;
  const double flops_per_thread = flops_per_iter * static_cast<double>(iters);
  return best_rate(pool, reps, flops_per_thread, [&] {
    return isa == Isa::Avx512 ? avx512::fma_peak_loop(iters)
           : isa == Isa::Avx2 ? avx2::fma_peak_loop(iters)
                              : scalar_fma_loop(iters);
  });
}

double measure_peak_int8_ops(ThreadPool& pool, Isa isa, int reps) {
  if (isa == Isa::Scalar) return 0;
  const int64_t iters = 1'000'000;
  // AVX2: 8 chains x 32 multiply-adds per iteration; AVX-512: 12 chains of vpdpbusd x 64.
  const double macs_per_iter = isa == Isa::Avx512 ? 12.0 * 64 : 8.0 * 32;
  const double ops_per_thread = macs_per_iter * 2 * static_cast<double>(iters);
  return best_rate(pool, reps, ops_per_thread, [&] {
    return isa == Isa::Avx512 ? avx512::int8_peak_loop(iters) : avx2::int8_peak_loop(iters);
  });
}

double measure_peak_bf16_flops(ThreadPool& pool, Isa isa, int reps) {
  if (isa != Isa::Avx512 || !cpu_has_avx512_bf16()) return 0;
  const int64_t iters = 1'000'000;
  const double flops_per_thread = 12.0 * 32 * 2 * static_cast<double>(iters);  // 12 chains x 32 multiply-adds
  return best_rate(pool, reps, flops_per_thread, [&] { return avx512::bf16_peak_loop(iters); });
}

}  // namespace peregrine
