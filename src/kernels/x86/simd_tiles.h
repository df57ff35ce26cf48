#pragma once
// ISA-neutral tiling helpers shared by the SIMD kernel files (simd_avx2*.cpp, simd_avx512*.cpp).
// Templates only, no intrinsics: each file instantiates them with its own lambdas, so no
// instantiation compiled for one ISA can be picked by the linker for another.
#include <cstdint>

namespace peregrine::simd {

// A token count known at compile time (our own tag: no library templates in the SIMD files).
template <int N>
struct Tokens {
  static constexpr int value = N;
};

// tile(Tokens<N>{}, t) for the N = rest in [1, kMax]; nothing for rest == 0.
template <int kMax, class Tile>
inline void rest_tile(int64_t rest, int64_t t, Tile& tile) {
  if constexpr (kMax >= 1) {
    if (rest == kMax) return tile(Tokens<kMax>{}, t);
    rest_tile<kMax - 1>(rest, t, tile);
  }
}

// Covers tokens [0, n_tokens) with tiles: tile(Tokens<kT>{}, t) while kT fit, then one tile of
// the remaining 1..kT-1 tokens.
template <int kT, class Tile>
inline void token_tiles(int64_t n_tokens, Tile&& tile) {
  int64_t t = 0;
  for (; t + kT <= n_tokens; t += kT) tile(Tokens<kT>{}, t);
  rest_tile<kT - 1>(n_tokens - t, t, tile);
}

}  // namespace peregrine::simd
