#pragma once
// The sampler's own random number generator: xoshiro256** seeded through splitmix64, with its
// own conversion to a uniform double. std::mt19937 is portable but std::*_distribution is not
// (each standard library maps bits to values its own way), so nothing here uses <random>: a seed
// gives the same stream of draws on every compiler, platform and library version.
#include <cstdint>

namespace peregrine {

// splitmix64 (Steele, Lea, Flood 2014): used only to expand a 64-bit seed into xoshiro's state,
// as the xoshiro authors recommend; it never yields the forbidden all-zero state in practice.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();

 private:
  uint64_t state_;
};

// xoshiro256** 1.0 (Blackman & Vigna 2018). Small, fast, passes BigCrush; one per request.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1): the top 53 bits scaled by 2^-53, so every value is an exact double and
  // 1.0 is never returned.
  double next_unit();

 private:
  uint64_t s_[4];
};

}  // namespace peregrine
