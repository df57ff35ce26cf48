#pragma once
// A small, fully specified PRNG for synthetic weights. std::normal_distribution and friends are
// implementation-defined, so the same seed would give different models on different standard
// libraries; splitmix64 + Box-Muller is defined here bit for bit (up to libm's log/cos/sqrt).
#include <cmath>
#include <cstdint>
#include <string_view>

namespace peregrine::synth {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit counter passed through a strong mixer.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in the open interval (0, 1): 53 random mantissa bits, offset by half a step so
  // log() in Box-Muller never sees 0.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Standard normal samples by Box-Muller, using both values of each pair.
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed) {}

  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double two_pi = 6.283185307179586476925;
    double radius = std::sqrt(-2.0 * std::log(rng_.uniform()));
    double angle = two_pi * rng_.uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

  double uniform() { return rng_.uniform(); }

 private:
  SplitMix64 rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// FNV-1a of a tensor name: each tensor gets its own stream (seed ^ hash), so its values do not
// depend on which tensors come before it.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace peregrine::synth
