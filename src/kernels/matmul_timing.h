#pragma once
// What timing a matmul kernel takes, shared by `peregrine roofline` and the web page's lab (the
// matrix-multiply panel): the textbook triple loop as the "before" point, reproducible random
// inputs, and a median-of-repetitions timer.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace peregrine {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// y = x W^T as the textbook triple loop, one thread, one running sum per output, no blocking, no
// SIMD beyond what the compiler finds (an in-order f32 sum keeps it from vectorizing).
// w: [n_out][n_in], x: [n_tokens][n_in], y: [n_tokens][n_out].
void naive_matmul(const float* w, const float* x, float* y, int64_t n_tokens, int64_t n_out, int64_t n_in);

// n floats in [-1, 1) from a 32-bit LCG (s = s * 1664525 + 1013904223, value ((s >> 8) - 2^23) / 2^23):
// plenty for benchmark data, fast at 10^7, and simple enough that the web page reproduces the same
// matrices in JavaScript from the same seed.
std::vector<float> lcg_floats(int64_t n, uint32_t seed);

// Median seconds per call of `call`: one warm-up call that also sizes the repetitions, then
// `reps` repetitions of k calls each, k chosen so a repetition lasts at least min_rep_s. A call
// that alone takes over half a second gets three repetitions (enough for a median). Returns the
// median and the repetitions run.
template <class Call>
std::pair<double, int> time_calls(Call&& call, int reps, double min_rep_s) {
  double t0 = now_seconds();
  call();
  const double first = std::max(now_seconds() - t0, 1e-7);
  const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_rep_s / first)));
  if (first > 0.5) reps = std::min(reps, 3);
  std::vector<double> per_call;
  for (int r = 0; r < reps; ++r) {
    t0 = now_seconds();
    for (int64_t i = 0; i < k; ++i) call();
    per_call.push_back((now_seconds() - t0) / static_cast<double>(k));
  }
  std::sort(per_call.begin(), per_call.end());
  const size_t n = per_call.size();
  return {n % 2 ? per_call[n / 2] : 0.5 * (per_call[n / 2 - 1] + per_call[n / 2]), reps};
}

}  // namespace peregrine
