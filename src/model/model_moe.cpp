// The mixture-of-experts feed-forward: route every token of the step, group the (token, expert)
// pairs by expert so each expert's weights are read once for all the tokens routed to it, run
// the experts, and sum each token's k outputs (weighted) in ascending expert order, so a token's
// result depends only on the token (batch and thread invariance as for dense layers).
#include <algorithm>

#include "model/model.h"

namespace peregrine {
namespace {

template <class T>
std::span<T> first(std::vector<T>& v, int64_t count) {
  return {v.data(), static_cast<size_t>(count)};
}

}  // namespace

// From s_.experts / s_.weights ([n][k]) to the grouped rows: expert by expert ascending, and
// within an expert its tokens in batch order (a counting sort). Also counts the experts run.
void Model::group_by_expert(int64_t n) {
  const int64_t e_count = config_.moe.n_experts(), k = config_.moe.n_used();
  std::vector<int64_t>& start = s_.expert_rows;
  std::fill(start.begin(), start.end(), 0);
  for (int64_t i = 0; i < n * k; ++i) ++start[static_cast<size_t>(s_.experts[static_cast<size_t>(i)]) + 1];
  int64_t touched = 0;
  for (int64_t e = 0; e < e_count; ++e) {
    touched += start[static_cast<size_t>(e) + 1] > 0 ? 1 : 0;
    start[static_cast<size_t>(e) + 1] += start[static_cast<size_t>(e)];
  }
  // Fill positions: `next` walks each expert's range; restored to the starts afterwards.
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const auto i = static_cast<size_t>(t * k + j);
      const auto slot = static_cast<size_t>(start[static_cast<size_t>(s_.experts[i])]++);
      s_.grouped_token[slot] = static_cast<int32_t>(t);
      s_.grouped_weight[slot] = s_.weights[i];
    }
  }
  for (int64_t e = e_count; e > 0; --e) start[static_cast<size_t>(e)] = start[static_cast<size_t>(e) - 1];
  start[0] = 0;
  ++moe_stats_.layer_steps;
  moe_stats_.experts_run += touched;
}

void Model::moe_block(const Layer& L, int64_t n, std::span<float> x) {
  const ModelConfig& c = config_;
  const MoeConfig& moe = c.moe;
  const int64_t m = n * moe.n_used(), ffe = moe.expert_ffn_dim;
  const std::span<float> xb = first(s_.xb, n * c.dim), proj = first(s_.proj, n * c.dim);
  ctx_->rmsnorm(x, L.ffn_norm, c.rms_eps, xb, n);
  ctx_->matmul(L.router, xb, first(s_.router, n * moe.n_experts()), n);
  ctx_->route_experts(first(s_.router, n * moe.n_experts()), moe.routing, first(s_.experts, m), first(s_.weights, m));
  group_by_expert(n);
  const std::span<const int32_t> rows = first(s_.grouped_token, m);
  const std::span<float> xg = first(s_.xg, m * c.dim), gate = first(s_.gate, m * ffe), up = first(s_.up, m * ffe),
                         yg = first(s_.yg, m * c.dim);
  ctx_->gather_rows(xb, rows, xg, c.dim);
  ctx_->matmul_experts(L.gate_exps, s_.expert_rows, xg, gate);
  ctx_->matmul_experts(L.up_exps, s_.expert_rows, xg, up);
  ctx_->swiglu(gate, up);
  ctx_->matmul_experts(L.down_exps, s_.expert_rows, gate, yg);
  ctx_->combine_rows(yg, rows, first(s_.grouped_weight, m), proj, c.dim);
  if (moe.shared_ffn_dim > 0) {  // qwen2moe: + sigmoid(w · x) * shared_expert(x)
    const int64_t ffs = moe.shared_ffn_dim;
    const std::span<float> sg = first(s_.gate, n * ffs), su = first(s_.up, n * ffs),
                           out = first(s_.shared_out, n * c.dim), logit = first(s_.shared_logit, n);
    ctx_->matmul(L.shared_gate, xb, sg, n);
    ctx_->matmul(L.shared_up, xb, su, n);
    ctx_->swiglu(sg, su);
    ctx_->matmul(L.shared_down, sg, out, n);
    ctx_->matmul(L.shared_gate_inp, xb, logit, n);
    ctx_->sigmoid_gate(out, logit, n);
    ctx_->add(proj, out);
  }
  ctx_->add(x, proj);
}

}  // namespace peregrine
