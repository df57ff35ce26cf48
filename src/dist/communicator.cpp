#include "dist/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

namespace peregrine::dist {
namespace {

std::atomic<int> g_stop_signal{0};

}  // namespace

void request_stop(int signal_number) { g_stop_signal.store(signal_number, std::memory_order_relaxed); }

int stop_requested() { return g_stop_signal.load(std::memory_order_relaxed); }

void throw_if_stop_requested() {
  if (const int sig = stop_requested()) {
    throw CommError(std::string("stopped by signal ") + std::to_string(sig) + " (" + strsignal(sig) +
                    "): the launcher ends the whole job when one of its processes fails or it is interrupted");
  }
}

void Communicator::all_reduce_sum(std::span<float> x) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = x.size(), ranks = static_cast<size_t>(size());
  gathered_.resize(n * ranks);
  all_gather(std::as_bytes(std::span<const float>(x)), std::as_writable_bytes(std::span<float>(gathered_)));
  // Rank 0's part first, then each next rank's: the same order everywhere.
  std::copy_n(gathered_.begin(), n, x.begin());
  for (size_t r = 1; r < ranks; ++r) {
    const float* part = gathered_.data() + r * n;
    for (size_t i = 0; i < n; ++i) x[i] += part[i];
  }
  ++stats_.all_reduces;
  stats_.all_reduce_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace peregrine::dist
