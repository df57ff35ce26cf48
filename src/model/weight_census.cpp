#include "model/weight_census.h"

#include <cmath>
#include <string_view>

namespace peregrine {

bool is_expert_tensor(const TensorView& t) {
  return t.shape.size() == 3 && std::string_view(t.name).ends_with("_exps.weight");
}

WeightCensus weight_census(const ModelFile& file, const ModelConfig& config) {
  WeightCensus c;
  c.n_experts = config.moe.n_experts();
  c.n_used = config.moe.n_used();
  for (const TensorView& t : file.tensors) {
    const bool expert = is_expert_tensor(t);
    (expert ? c.expert_params : c.dense_params) += t.n_elements();
    (expert ? c.expert_bytes : c.dense_bytes) += t.data.size();
  }
  return c;
}

double expected_experts_touched(int64_t n_experts, int64_t n_used, int64_t batch) {
  if (n_experts <= 0) return 0.0;
  const double e = static_cast<double>(n_experts), k = static_cast<double>(n_used);
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(batch)));
}

}  // namespace peregrine
