#pragma once
// An independent, scalar reference of the whole transformer forward pass (llama with or without a
// sliding window (Mistral), qwen2, qwen3, phi3, gemma2, gemma3, and the mixtures of experts Mixtral
// (llama), qwen2moe and qwen3moe, as llama.cpp computes them),
// written for clarity rather than speed: plain loops, double accumulation, no KV cache, no code
// shared with the optimized model beyond reading the file.
// Tests compare the optimized engine against it.
#include <cstdint>
#include <span>
#include <vector>

#include "format/model_file.h"

namespace peregrine {

// logits[t][v] for every position t of `tokens` (one sequence starting at position 0).
// Reads the hyper-parameters from the file's metadata itself. Throws FormatError for a file it
// cannot interpret (missing key or tensor, wrong shape) and UsageError for a token id outside
// the vocabulary or an empty token list.
std::vector<std::vector<double>> reference_forward(const ModelFile& file, std::span<const int32_t> tokens);

// Greedy decoding with the reference: starting from `prompt`, appends the argmax of the last
// row `n_new` times and returns only the new tokens. O(n^2) forward passes; for small models.
std::vector<int32_t> reference_greedy(const ModelFile& file, std::span<const int32_t> prompt, int n_new);

}  // namespace peregrine
