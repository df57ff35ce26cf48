#include "model/model.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

template <class T>
void grow_host(std::vector<T>& v, int64_t size) {
  if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
}

}  // namespace

std::span<float> Model::grow(Buffer& b, int64_t floats) { return grow_buffer(*ctx_, b, static_cast<size_t>(floats)); }

std::span<float> Model::view(const Buffer& b, int64_t floats) {
  return b.as<float>().first(static_cast<size_t>(floats));
}

void Model::validate(const Batch& batch, const KvCache& kv) {
  const ModelConfig& c = config_;
  const size_t n = batch.tokens.size();
  if (batch.positions.size() != n || batch.seq_ids.size() != n || batch.want_logits.size() != n) {
    throw UsageError("batch: tokens, positions, seq_ids and want_logits differ in length");
  }
  const KvShape want = kv_shape(), have = kv.storage().shape();
  if (have.n_layers != want.n_layers || have.n_kv_heads != want.n_kv_heads || have.head_dim != want.head_dim) {
    throw UsageError("KV cache was built for a different model shape");
  }
  auto fail = [&](size_t i, const std::string& problem) {
    throw UsageError("batch row " + std::to_string(i) + " (sequence " + std::to_string(batch.seq_ids[i]) +
                     "): " + problem);
  };
  // (sequence, last position seen in this batch); batches hold few sequences, so a linear scan
  // over a reused vector beats hashing and allocates nothing after the first call.
  auto& last = s_.seq_last;
  last.clear();
  for (size_t i = 0; i < n; ++i) {
    const TokenId tok = batch.tokens[i];
    const int64_t pos = batch.positions[i];
    const SeqId seq = batch.seq_ids[i];
    if (shape_.first_stage && (tok < 0 || tok >= c.n_vocab)) {
      fail(i, "token id " + std::to_string(tok) + " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    }
    if (pos < 0 || pos >= c.context_length) {
      fail(i, "position " + std::to_string(pos) + " is outside the context [0, " + std::to_string(c.context_length) +
                  ")");
    }
    if (pos >= kv.pool().capacity(seq)) fail(i, "no KV cache reserved for position " + std::to_string(pos));
    auto it = std::find_if(last.begin(), last.end(), [seq](const auto& e) { return e.first == seq; });
    if (it == last.end()) {
      last.emplace_back(seq, pos);
    } else {
      if (pos != it->second + 1) {
        fail(i, "position " + std::to_string(pos) + " does not follow position " + std::to_string(it->second));
      }
      it->second = pos;
    }
  }
}

// Sizes the scratch for n tokens and resolves each token's cache row, context and block table.
void Model::prepare(const Batch& batch, const KvCache& kv) {
  const ModelConfig& c = config_;
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t qd = shape_.n_heads() * c.head_dim, kvd = shape_.n_kv_heads() * c.head_dim;
  grow(s_.xb, n * c.dim);
  grow(s_.q, n * qd);
  grow(s_.k, n * kvd);
  grow(s_.v, n * kvd);
  grow(s_.att, n * qd);
  grow(s_.proj, n * c.dim);
  const MoeConfig& moe = c.moe;
  const int64_t ffn_rows = c.is_moe() ? std::max(n * moe.n_used() * moe.expert_ffn_dim, n * moe.shared_ffn_dim)
                                      : n * shape_.ffn();
  grow(s_.gate, ffn_rows);
  grow(s_.up, ffn_rows);
  if (c.is_moe()) {
    const int64_t m = n * moe.n_used();
    grow(s_.router, n * moe.n_experts());
    grow_host(s_.experts, m);
    grow_host(s_.weights, m);
    grow_host(s_.grouped_token, m);
    grow_host(s_.grouped_weight, m);
    s_.expert_rows.resize(static_cast<size_t>(shape_.n_experts() + 1));
    s_.pair_slot.resize(static_cast<size_t>(m));
    grow(s_.xg, m * c.dim);
    grow(s_.yg, m * c.dim);
    grow(s_.shared_out, n * c.dim);
    grow(s_.shared_logit, n);
  }
  const std::span<float> cs = grow(s_.rope_cs, n * c.rope_dim);
  s_.kv_rows.resize(static_cast<size_t>(n));
  s_.n_ctx.resize(static_cast<size_t>(n));
  s_.tables.resize(static_cast<size_t>(n));
  for (size_t t = 0; t < batch.size(); ++t) {
    s_.kv_rows[t] = kv.pool().row_of(batch.seq_ids[t], batch.positions[t]);
    s_.n_ctx[t] = batch.positions[t] + 1;
    s_.tables[t] = kv.pool().block_table(batch.seq_ids[t])->blocks();
  }
  ctx_->rope_angles(batch.positions, rope_, cs);
  if (c.rope_freq_base_swa > 0.f) ctx_->rope_angles(batch.positions, rope_swa_, grow(s_.rope_cs_swa, n * c.rope_dim));
}

void Model::reduce_across_ranks(std::span<float> proj) {
  s_.reduce.resize(proj.size());
  ctx_->copy_to_host(proj, s_.reduce);
  all_reduce_(s_.reduce);
  ctx_->copy_from_host(s_.reduce, proj);
}

void Model::attention_block(const Layer& L, int64_t layer, int64_t n, KvCache& kv, std::span<float> x) {
  const ModelConfig& c = config_;
  const int64_t nh = shape_.n_heads(), nkv = shape_.n_kv_heads();
  const int64_t qd = nh * c.head_dim, kvd = nkv * c.head_dim;
  // The layer's place in the whole model decides its window (and, in gemma3, its RoPE).
  const int64_t window = c.layer_window(shape_.layer_begin + layer);
  const bool local_rope = window > 0 && c.rope_freq_base_swa > 0.f;
  const RopeParams& rope = local_rope ? rope_swa_ : rope_;
  const std::span<float> xb = view(s_.xb, n * c.dim), q = view(s_.q, n * qd), k = view(s_.k, n * kvd),
                         v = view(s_.v, n * kvd), att = view(s_.att, n * qd), proj = view(s_.proj, n * c.dim),
                         cs = view(local_rope ? s_.rope_cs_swa : s_.rope_cs, n * c.rope_dim);
  const KvBatchLayout layout{s_.kv_rows, s_.n_ctx, s_.tables};
  ctx_->rmsnorm(x, L.attn_norm, c.rms_eps, xb, n);
  const MatmulOutput qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
  ctx_->matmuls(qkv, xb, n);
  if (c.qkv_bias) {
    ctx_->add_bias(q, L.q_bias, n);
    ctx_->add_bias(k, L.k_bias, n);
    ctx_->add_bias(v, L.v_bias, n);
  }
  if (c.qk_norm) {  // each head on its own: rows of head_dim
    ctx_->rmsnorm(q, L.q_norm, c.rms_eps, q, n * nh);
    ctx_->rmsnorm(k, L.k_norm, c.rms_eps, k, n * nkv);
  }
  ctx_->rope(q, nh, c.head_dim, rope, cs, n);
  ctx_->rope(k, nkv, c.head_dim, rope, cs, n);
  // Every token's K/V of this layer is in the cache before anyone attends, so a prompt chunk
  // sees its own earlier tokens.
  ctx_->write_kv(kv.storage(), layer, layout, k, v);
  ctx_->attention(kv.storage(), layer, layout, nh, AttentionParams(c.attention_scale(), window, c.attn_softcap), q,
                  att);
  ctx_->matmul(L.wo, att, proj, n);
  if (shape_.tensor_split) reduce_across_ranks(proj);
  if (c.post_norms) ctx_->rmsnorm(proj, L.post_attn_norm, c.rms_eps, proj, n);
  ctx_->add(x, proj);
}

// SwiGLU (GeGLU for gemma) feed-forward with its residual.
void Model::ffn_block(const Layer& L, int64_t n, std::span<float> x) {
  const ModelConfig& c = config_;
  const std::span<float> xb = view(s_.xb, n * c.dim), gate = view(s_.gate, n * shape_.ffn()),
                         up = view(s_.up, n * shape_.ffn()), proj = view(s_.proj, n * c.dim);
  ctx_->rmsnorm(x, L.ffn_norm, c.rms_eps, xb, n);
  ctx_->matmul_glu(L.w_gate, L.w_up, c.gelu_ffn ? Glu::Gelu : Glu::Silu, xb, gate, up, n);
  ctx_->matmul(L.w_down, gate, proj, n);
  if (shape_.tensor_split) reduce_across_ranks(proj);
  if (c.post_norms) ctx_->rmsnorm(proj, L.post_ffn_norm, c.rms_eps, proj, n);
  ctx_->add(x, proj);
}

void Model::forward_layers(const Batch& batch, KvCache& kv, std::span<const float> hidden_in) {
  validate(batch, kv);
  // Copy-on-write's copies reach the storage before this pass reads or writes it.
  apply_block_copies(*ctx_, kv);
  if (shape_.tensor_split && !all_reduce_) {
    throw UsageError("model: a tensor-parallel slice needs an all-reduce (set_all_reduce) to run");
  }
  if (shape_.expert_split && !all_to_all_) {
    throw UsageError("model: an expert-parallel slice needs an all-to-all (set_all_to_all) to run");
  }
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t dim = config_.dim;
  if (shape_.first_stage && !hidden_in.empty()) {
    throw UsageError("model: the first pipeline stage embeds its tokens; it takes no hidden states");
  }
  if (!shape_.first_stage && static_cast<int64_t>(hidden_in.size()) != n * dim) {
    throw UsageError("model: a later pipeline stage needs the previous stage's [" + std::to_string(n) + "][" +
                     std::to_string(dim) + "] hidden states");
  }
  n_hidden_rows_ = 0;
  if (n == 0) return;
  const std::span<float> x = grow(s_.hidden, n * dim);
  prepare(batch, kv);
  if (shape_.first_stage) {
    ctx_->embed(token_embd_, batch.tokens, x);
    if (config_.embed_scale > 0.f) ctx_->scale(x, config_.embed_scale);
  } else {
    ctx_->copy_from_host(hidden_in, x);
  }
  for (int64_t l = 0; l < shape_.n_layers(); ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    attention_block(L, l, n, kv, x);
    if (config_.is_moe()) {
      moe_block(L, n, x);
    } else {
      ffn_block(L, n, x);
    }
  }
  n_hidden_rows_ = n;
}

void Model::copy_hidden(std::vector<float>& out) const {
  out.resize(static_cast<size_t>(n_hidden_rows_ * config_.dim));
  ctx_->copy_to_host(view(s_.hidden, n_hidden_rows_ * config_.dim), out);
}

void Model::compute_logits(const Batch& batch, std::vector<float>& logits) {
  if (!shape_.last_stage) throw UsageError("model: only the last pipeline stage computes logits");
  const ModelConfig& c = config_;
  const auto n = static_cast<int64_t>(batch.size());
  if (n != n_hidden_rows_) throw UsageError("model: compute_logits needs forward_layers to have run this batch");
  // Only the rows that want logits, packed in batch order.
  s_.logit_rows.clear();
  for (int64_t t = 0; t < n; ++t) {
    if (batch.want_logits[static_cast<size_t>(t)] != 0) s_.logit_rows.push_back(static_cast<int32_t>(t));
  }
  const auto n_want = static_cast<int64_t>(s_.logit_rows.size());
  n_logits_rows_ = n_want;
  logits.resize(static_cast<size_t>(n_want * shape_.vocab()));
  if (n_want == 0) return;
  const std::span<float> xb = grow(s_.xb, n_want * c.dim), out = grow(s_.logits, n_want * shape_.vocab());
  ctx_->gather_rows(view(s_.hidden, n * c.dim), s_.logit_rows, xb, c.dim);
  ctx_->rmsnorm(xb, output_norm_, c.rms_eps, xb, n_want);
  ctx_->matmul(output_, xb, out, n_want);
  if (c.final_softcap > 0.f) ctx_->softcap(out, c.final_softcap);
  ctx_->copy_to_host(out, logits);
}

void Model::copy_logits_hidden(std::vector<float>& out) const {
  out.resize(static_cast<size_t>(n_logits_rows_ * config_.dim));
  ctx_->copy_to_host(view(s_.xb, n_logits_rows_ * config_.dim), out);
}

void Model::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  if (!shape_.first_stage || !shape_.last_stage || shape_.tensor_split) {
    throw UsageError("model: forward() needs the whole model; a slice runs forward_layers / compute_logits");
  }
  forward_layers(batch, kv);
  compute_logits(batch, logits);
}

}  // namespace peregrine
