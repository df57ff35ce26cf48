// The mixture-of-experts feed-forward: route every token of the step, group the (token, expert)
// pairs by expert so each expert's weights are read once for all the tokens routed to it, run
// the experts, and sum each token's k outputs (weighted) in ascending expert order, so a token's
// result depends only on the token (batch and thread invariance as for dense layers).
//
// Expert parallelism (shape_.expert_split): every rank holds E / T whole experts. The hidden
// states are already on every rank (the attention all-reduce put them there), so no token has to
// be sent to its experts: each rank routes every token (the same bits everywhere), runs its own
// experts on the tokens routed to them, and sends each output to the rank that adds up that
// token (all-to-all-v; rank r adds up the tokens [r n / T, (r + 1) n / T)). Each token's k outputs
// arrive in ascending expert order, so the sum is the one a single process computes, bit for bit.
// A second all-to-all-v gives every rank every token's sum.
#include <algorithm>

#include "model/model.h"

namespace peregrine {
namespace {

template <class T>
std::span<T> first(std::vector<T>& v, int64_t count) {
  return {v.data(), static_cast<size_t>(count)};
}

size_t at(int64_t i) { return static_cast<size_t>(i); }

}  // namespace

// From s_.experts / s_.weights ([n][k]) to the grouped rows of the experts this slice holds:
// expert by expert ascending, and within an expert its tokens in batch order (a counting sort).
// Also records each pair's grouped row and counts the experts run.
void Model::group_by_expert(int64_t n) {
  const int64_t e0 = shape_.expert_begin, e_count = shape_.n_experts(), k = config_.moe.n_used();
  std::vector<int64_t>& start = s_.expert_rows;
  std::fill(start.begin(), start.end(), 0);
  auto held = [&](int32_t e) { return e >= e0 && e < e0 + e_count; };
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t e = s_.experts[at(i)];
    if (held(e)) ++start[at(e - e0 + 1)];
  }
  int64_t touched = 0;
  for (int64_t e = 0; e < e_count; ++e) {
    touched += start[at(e + 1)] > 0 ? 1 : 0;
    start[at(e + 1)] += start[at(e)];
  }
  // Fill positions: `next` walks each expert's range; restored to the starts afterwards.
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const auto i = at(t * k + j);
      const int32_t e = s_.experts[i];
      if (!held(e)) {
        s_.pair_slot[i] = -1;
        continue;
      }
      const auto slot = at(start[at(e - e0)]++);
      s_.pair_slot[i] = static_cast<int32_t>(slot);
      s_.grouped_token[slot] = static_cast<int32_t>(t);
      s_.grouped_weight[slot] = s_.weights[i];
    }
  }
  for (int64_t e = e_count; e > 0; --e) start[at(e)] = start[at(e - 1)];
  start[0] = 0;
  ++moe_stats_.layer_steps;
  moe_stats_.experts_run += touched;
}

// The m grouped rows through their experts: s_.yg [m][dim].
void Model::run_experts(const Layer& L, std::span<const float> xb, int64_t m) {
  if (m == 0) return;
  const int64_t dim = config_.dim, ffe = config_.moe.expert_ffn_dim;
  const std::span<float> xg = view(s_.xg, m * dim), gate = view(s_.gate, m * ffe), up = view(s_.up, m * ffe),
                         yg = view(s_.yg, m * dim);
  ctx_->gather_rows(xb, first(s_.grouped_token, m), xg, dim);
  ctx_->matmul_experts(L.gate_exps, s_.expert_rows, xg, gate);
  ctx_->matmul_experts(L.up_exps, s_.expert_rows, xg, up);
  ctx_->swiglu(gate, up);
  ctx_->matmul_experts(L.down_exps, s_.expert_rows, gate, yg);
}

// qwen2moe: proj += sigmoid(w · x) * shared_expert(x) for n rows.
void Model::shared_expert(const Layer& L, std::span<const float> xb, std::span<float> proj, int64_t n) {
  const int64_t ffs = config_.moe.shared_ffn_dim, dim = config_.dim;
  if (ffs == 0 || n == 0) return;
  const std::span<float> sg = view(s_.gate, n * ffs), su = view(s_.up, n * ffs), out = view(s_.shared_out, n * dim),
                         logit = view(s_.shared_logit, n);
  const MatmulOutput shared[] = {{&L.shared_gate, sg}, {&L.shared_up, su}, {&L.shared_gate_inp, logit}};
  ctx_->matmuls(shared, xb, n);
  ctx_->swiglu(sg, su);
  ctx_->matmul(L.shared_down, sg, out, n);
  ctx_->sigmoid_gate(out, logit, n);
  ctx_->add(proj, out);
}

void Model::moe_block(const Layer& L, int64_t n, std::span<float> x) {
  const ModelConfig& c = config_;
  const MoeConfig& moe = c.moe;
  const int64_t pairs = n * moe.n_used();
  const std::span<float> xb = view(s_.xb, n * c.dim), proj = view(s_.proj, n * c.dim),
                         router = view(s_.router, n * moe.n_experts());
  ctx_->rmsnorm(x, L.ffn_norm, c.rms_eps, xb, n);
  ctx_->matmul(L.router, xb, router, n);
  ctx_->route_experts(router, moe.routing, first(s_.experts, pairs), first(s_.weights, pairs));
  group_by_expert(n);
  const int64_t m = s_.expert_rows.back();
  run_experts(L, xb, m);
  if (shape_.expert_split) {
    combine_across_ranks(L, n, proj);
  } else {
    ctx_->combine_rows(view(s_.yg, m * c.dim), first(s_.grouped_token, m), first(s_.grouped_weight, m), proj, c.dim);
    shared_expert(L, xb, proj, n);
  }
  ctx_->add(x, proj);
}

// Expert parallelism: this rank's expert outputs (s_.yg) to the ranks adding up their tokens, this
// rank's tokens added up (with the shared expert), and every rank's sums to every rank: proj [n][dim].
// The exchanges run on the host: the outputs to send are gathered in the context's memory and
// copied out, what arrives is copied in before the context adds it up.
void Model::combine_across_ranks(const Layer& L, int64_t n, std::span<float> proj) {
  const SliceShape& sh = shape_;
  const int64_t ranks = sh.ep_size, me = sh.ep_rank, k = config_.moe.n_used(), dim = config_.dim;
  s_.ep_send_counts.assign(at(ranks), 0);
  s_.ep_recv_counts.assign(at(ranks), 0);
  // Outputs of held pairs, ordered by the rank adding up their token, then token, then expert.
  s_.ep_send_slots.clear();
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t t = sh.token_begin(n, r); t < sh.token_begin(n, r + 1); ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t slot = s_.pair_slot[at(t * k + j)];
        if (slot < 0) continue;
        s_.ep_send_slots.push_back(slot);
        s_.ep_send_counts[at(r)] += dim;
      }
    }
  }
  const int64_t m = s_.expert_rows.back(), sent = static_cast<int64_t>(s_.ep_send_slots.size());
  const std::span<float> out = grow(s_.ep_out, sent * dim);
  ctx_->gather_rows(view(s_.yg, m * dim), s_.ep_send_slots, out, dim);
  s_.ep_send.resize(at(sent * dim));
  ctx_->copy_to_host(out, s_.ep_send);
  // What arrives: from each rank in turn, its experts' outputs for this rank's tokens, in the same
  // order; so each token's outputs come in ascending expert order.
  const int64_t t0 = sh.token_begin(n, me), t1 = sh.token_begin(n, me + 1), mine = t1 - t0;
  s_.ep_rows.clear();
  s_.ep_weights.clear();
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        if (sh.expert_owner(s_.experts[at(t * k + j)]) != r) continue;
        s_.ep_rows.push_back(static_cast<int32_t>(t - t0));
        s_.ep_weights.push_back(s_.weights[at(t * k + j)]);
        s_.ep_recv_counts[at(r)] += dim;
      }
    }
  }
  const auto received = static_cast<int64_t>(s_.ep_rows.size());
  s_.ep_recv.resize(at(received * dim));
  all_to_all_(s_.ep_send, s_.ep_send_counts, s_.ep_recv, s_.ep_recv_counts);
  const std::span<float> in = grow(s_.ep_in, received * dim);
  ctx_->copy_from_host(s_.ep_recv, in);
  // This rank's tokens added up (in s_.xg, free again), then handed to every rank.
  const std::span<float> sums = view(s_.xg, mine * dim);
  ctx_->combine_rows(in, s_.ep_rows, s_.ep_weights, sums, dim);
  shared_expert(L, view(s_.xb, n * dim).subspan(at(t0 * dim), at(mine * dim)), sums, mine);
  s_.ep_send.resize(at(ranks * mine * dim));
  ctx_->copy_to_host(sums, std::span<float>(s_.ep_send).first(at(mine * dim)));
  for (int64_t r = 0; r < ranks; ++r) {
    if (r > 0) std::copy_n(s_.ep_send.begin(), mine * dim, s_.ep_send.begin() + r * mine * dim);
    s_.ep_send_counts[at(r)] = mine * dim;
    s_.ep_recv_counts[at(r)] = (sh.token_begin(n, r + 1) - sh.token_begin(n, r)) * dim;
  }
  s_.ep_recv.resize(at(n * dim));
  all_to_all_(s_.ep_send, s_.ep_send_counts, s_.ep_recv, s_.ep_recv_counts);
  ctx_->copy_from_host(s_.ep_recv, proj);
}

}  // namespace peregrine
