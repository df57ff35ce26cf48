#pragma once
// What a model's weights weigh, split into the weights every token uses (attention, norms,
// embeddings, routers, shared experts) and the routed experts, of which a token uses k of the E in
// each layer. `peregrine info` prints it; `peregrine bench` bounds decode by the bytes a step
// actually reads (the dense weights plus the experts the step's tokens touch).
#include <cstdint>

#include "format/model_file.h"
#include "model/config.h"

namespace peregrine {

struct WeightCensus {
  int64_t n_experts = 0, n_used = 0;  // E, k (0, 0 for a dense model)
  int64_t dense_params = 0, expert_params = 0;  // expert_params: every expert of every layer
  uint64_t dense_bytes = 0, expert_bytes = 0;

  int64_t params() const { return dense_params + expert_params; }
  uint64_t bytes() const { return dense_bytes + expert_bytes; }
  // What one token uses: the dense weights and k / E of the experts.
  double active_params() const { return dense_params + expert_fraction(n_used) * static_cast<double>(expert_params); }
  double active_bytes() const { return static_cast<double>(dense_bytes) + expert_fraction(n_used) * static_cast<double>(expert_bytes); }
  // The share of the expert bytes a step reads when `experts` distinct experts run per layer.
  double expert_fraction(double experts) const { return n_experts > 0 ? experts / static_cast<double>(n_experts) : 0.0; }
};

// A stacked expert tensor (llama.cpp's ffn_{gate,up,down}_exps).
bool is_expert_tensor(const TensorView& t);

WeightCensus weight_census(const ModelFile& file, const ModelConfig& config);

// E · (1 − (1 − k/E)^B): the expected number of distinct experts B tokens touch in one layer when
// each picks k of E uniformly (k at B = 1, E as B grows). Routers are not uniform, so a real
// step may touch fewer; `peregrine bench` prints the measured count next to it.
double expected_experts_touched(int64_t n_experts, int64_t n_used, int64_t batch);

}  // namespace peregrine
