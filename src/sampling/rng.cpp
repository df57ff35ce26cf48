#include "sampling/rng.h"

namespace peregrine {

namespace {
constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;  // splitmix64's increment (2^64 / golden ratio)
}  // namespace

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next() { return mix64(state_ += kGamma); }

// splitmix64 seeded with `seed` yields mix64(seed + (n + 1) * gamma) as its n-th word: the
// per-seed key is its first word, the step's key the step-th word of the stream seeded with it,
// and a token's bits the token-th word of the stream seeded with the step's key.
uint64_t draw_step_key(uint64_t seed, uint64_t step) { return mix64(mix64(seed + kGamma) + (step + 1) * kGamma); }

uint64_t draw_bits(uint64_t step_key, uint32_t token) { return mix64(step_key + (uint64_t{token} + 1) * kGamma); }

double open_unit(uint64_t bits) { return (static_cast<double>(bits >> 12) + 0.5) * 0x1.0p-52; }

Rng::Rng(uint64_t seed) {
  SplitMix64 sm(seed);
  for (auto& word : s_) word = sm.next();
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::next_unit() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

}  // namespace peregrine
