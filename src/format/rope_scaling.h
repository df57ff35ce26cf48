#pragma once
// Llama 3's frequency-dependent RoPE scaling as per-pair divisors (GGUF's rope_freqs.weight),
// computed the way Meta's reference and llama.cpp's converter compute them: wavelengths shorter
// than old_context / high_freq_factor keep their frequency, longer than
// old_context / low_freq_factor are divided by `factor`, the band between is interpolated.
#include <cstdint>
#include <vector>

namespace peregrine {

struct Llama3RopeScaling {
  double factor = 8.0;  // Llama 3.1: 8; Llama 3.2 1B/3B: 32
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192.0;
};

// rope_dim / 2 divisors, one per rotated pair.
std::vector<float> llama3_rope_factors(int64_t rope_dim, double freq_base, const Llama3RopeScaling& s);

}  // namespace peregrine
