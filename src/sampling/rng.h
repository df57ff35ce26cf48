#pragma once
// The sampler's randomness. Token draws use counter-based noise (draw_bits): a pure function of
// (seed, step, token id), so anyone who knows a request's seed and the step a token will be drawn
// at can compute the noise of that draw (what coupled speculative proposals do). A stream
// generator, xoshiro256** seeded through splitmix64, serves the draws that are not tokens (the
// acceptance tests of independently drawn proposals). Each has its own conversion to a double. std::mt19937 is portable but std::*_distribution is not
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

// The finalizer of splitmix64: a bijection of 64-bit words whose every output bit depends on
// every input bit.
uint64_t mix64(uint64_t x);

// The noise of a sampler's draw number `step` for `token`: splitmix64's stream keyed by the
// seed and indexed by step, whose word keys a second stream indexed by token. For one seed and
// step, distinct tokens get distinct words (the finalizer is a bijection); draw_step_key() is
// the per-step part, computed once per draw.
uint64_t draw_step_key(uint64_t seed, uint64_t step);
uint64_t draw_bits(uint64_t step_key, uint32_t token);
// Uniform in the open interval (0, 1): the top 52 bits plus one half, scaled by 2^-52, so
// every value is an exact double in [2^-53, 1 - 2^-53] and -log of it is finite and > 0.
double open_unit(uint64_t bits);

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
