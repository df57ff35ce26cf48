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

// What one attention row reads, as reference_forward computes it: the query of `head` at the last
// position of `tokens` in layer `layer` (RoPE applied), and the keys and values of its KV head at
// every position 0..last (the web page's lab tiles them, docs/api.md).
struct ReferenceAttentionRow {
  std::vector<double> q;                  // [head_dim]
  std::vector<std::vector<double>> k, v;  // [last + 1][head_dim]
  int64_t kv_head = 0, head_dim = 0;
  double scale = 0, softcap = 0;  // score = q.k * scale, then softcap * tanh(score / softcap) when > 0
  int64_t window = 0;             // the layer's sliding window (0: none)
  int64_t first = 0;              // the first position the row attends
};
// Throws UsageError for a layer or head the model lacks, as reference_forward for tokens.
ReferenceAttentionRow reference_attention_row(const ModelFile& file, std::span<const int32_t> tokens, int64_t layer,
                                              int64_t head);

// Greedy decoding with the reference: starting from `prompt`, appends the argmax of the last
// row `n_new` times and returns only the new tokens. O(n^2) forward passes; for small models.
std::vector<int32_t> reference_greedy(const ModelFile& file, std::span<const int32_t> prompt, int n_new);

}  // namespace peregrine
