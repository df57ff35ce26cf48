#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class Binder {
 public:
  explicit Binder(const ModelFile& file) : file_(file) {}

  // A tensor of exactly `shape` whose rows can be dequantized (row length a multiple of the
  // type's block size).
  TensorView tensor(const std::string& name, std::vector<int64_t> shape) const {
    const TensorView* t = file_.find(name);
    if (!t) throw FormatError(file_.path + ": missing tensor '" + name + "'");
    if (t->shape != shape) {
      throw FormatError(file_.path + ": tensor '" + name + "' has shape " + shape_string(t->shape) +
                        ", expected " + shape_string(shape));
    }
    const auto& info = tensor_type_info(t->type);
    if (t->row_length() % info.block_elems != 0) {
      throw FormatError(file_.path + ": tensor '" + name + "' rows of " + std::to_string(t->row_length()) +
                        " elements are not a multiple of the " + std::string(info.name) + " block size " +
                        std::to_string(info.block_elems));
    }
    if (t->data.size() != tensor_bytes(t->type, t->n_elements())) {
      throw FormatError(file_.path + ": tensor '" + name + "' data size does not match its shape");
    }
    return *t;
  }

  // A 1-D tensor of length n, dequantized to f32 (norm weights and biases are tiny).
  std::vector<float> vector(const std::string& name, int64_t n) const {
    TensorView t = tensor(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    t.dequantize_row_to(0, out);
    return out;
  }

 private:
  const ModelFile& file_;
};

}  // namespace

Model::Model(ModelFile file) : Model(std::move(file), physical_core_count()) {}

Model::Model(ModelFile file, int n_threads) : Model(std::move(file), n_threads, Activations::Q8) {}

Model::Model(ModelFile file, int n_threads, Activations act)
    : file_(std::move(file)), config_(ModelConfig::from_model_file(file_)), isa_(active_isa()), act_(act) {
  if (n_threads < 1 || n_threads > 1024) {
    throw UsageError("thread count " + std::to_string(n_threads) + " is outside [1, 1024]");
  }
  pool_ = std::make_unique<ThreadPool>(n_threads);
  const ModelConfig& c = config_;
  Binder bind(file_);
  token_embd_ = bind.tensor("token_embd.weight", {c.dim, c.n_vocab});
  output_ = c.tied_output ? token_embd_ : bind.tensor("output.weight", {c.dim, c.n_vocab});
  output_norm_ = bind.vector("output_norm.weight", c.dim);
  layers_.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = layers_[static_cast<size_t>(l)];
    L.attn_norm = bind.vector(p + "attn_norm.weight", c.dim);
    L.wq = bind.tensor(p + "attn_q.weight", {c.dim, c.q_dim()});
    L.wk = bind.tensor(p + "attn_k.weight", {c.dim, c.kv_dim()});
    L.wv = bind.tensor(p + "attn_v.weight", {c.dim, c.kv_dim()});
    L.wo = bind.tensor(p + "attn_output.weight", {c.q_dim(), c.dim});
    if (c.qkv_bias) {
      L.q_bias = bind.vector(p + "attn_q.bias", c.q_dim());
      L.k_bias = bind.vector(p + "attn_k.bias", c.kv_dim());
      L.v_bias = bind.vector(p + "attn_v.bias", c.kv_dim());
    }
    L.ffn_norm = bind.vector(p + "ffn_norm.weight", c.dim);
    L.w_gate = bind.tensor(p + "ffn_gate.weight", {c.dim, c.ffn_dim});
    L.w_up = bind.tensor(p + "ffn_up.weight", {c.dim, c.ffn_dim});
    L.w_down = bind.tensor(p + "ffn_down.weight", {c.ffn_dim, c.dim});
  }
}

void Model::validate(const Batch& batch, const KvCache& kv) {
  const ModelConfig& c = config_;
  const size_t n = batch.tokens.size();
  if (batch.positions.size() != n || batch.seq_ids.size() != n || batch.want_logits.size() != n) {
    throw UsageError("batch: tokens, positions, seq_ids and want_logits differ in length");
  }
  if (kv.n_layers() != c.n_layers || kv.n_kv_heads() != c.n_kv_heads || kv.head_dim() != c.head_dim) {
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
    if (tok < 0 || tok >= c.n_vocab) {
      fail(i, "token id " + std::to_string(tok) + " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    }
    if (pos < 0 || pos >= c.context_length) {
      fail(i, "position " + std::to_string(pos) + " is outside the context [0, " + std::to_string(c.context_length) +
                  ")");
    }
    if (pos >= kv.capacity(seq)) fail(i, "no KV cache reserved for position " + std::to_string(pos));
    auto it = std::find_if(last.begin(), last.end(), [seq](const auto& e) { return e.first == seq; });
    if (it == last.end()) {
      if (pos > kv.seq_length(seq)) {
        fail(i, "position " + std::to_string(pos) + " leaves a gap after the " + std::to_string(kv.seq_length(seq)) +
                    " cached positions");
      }
      last.emplace_back(seq, pos);
    } else {
      if (pos != it->second + 1) {
        fail(i, "position " + std::to_string(pos) + " does not follow position " + std::to_string(it->second));
      }
      it->second = pos;
    }
  }
}

void Model::prepare_scratch(int64_t n) {
  const ModelConfig& c = config_;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  grow(s_.x, n * c.dim);
  grow(s_.xb, n * c.dim);
  grow(s_.q, n * c.q_dim());
  grow(s_.k, n * c.kv_dim());
  grow(s_.v, n * c.kv_dim());
  grow(s_.att, n * c.q_dim());
  grow(s_.proj, n * c.dim);
  grow(s_.gate, n * c.ffn_dim);
  grow(s_.up, n * c.ffn_dim);
  grow(s_.rope_cs, n * c.rope_dim);
  grow(s_.row, matmul_scratch_floats(std::max({c.dim, c.q_dim(), c.ffn_dim}), pool_->size()));
  const int64_t max_in = std::max({c.dim, c.q_dim(), c.ffn_dim});
  if (static_cast<int64_t>(s_.act_q8.size()) < q8_scratch_blocks(n, max_in)) {
    s_.act_q8.resize(static_cast<size_t>(q8_scratch_blocks(n, max_in)));
  }
  grow(s_.att_tmp, pool_->size() * attention_scratch_floats(c.n_heads, c.head_dim));
  if (static_cast<int64_t>(s_.kv_rows.size()) < n) {
    s_.kv_rows.resize(static_cast<size_t>(n));
    s_.n_ctx.resize(static_cast<size_t>(n));
  }
}

void Model::attention_layer(const Batch& batch, KvCache& kv, int64_t layer, std::span<const float> q,
                            std::span<float> att) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t qd = c.q_dim(), hd = c.head_dim, kvh = c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const KvLayerView view = kv.layer_view(layer);
  const int64_t att_scratch = attention_scratch_floats(c.n_heads, hd);
  auto thread_scratch = [&](int thread) {
    return std::span<float>(s_.att_tmp).subspan(static_cast<size_t>(thread * att_scratch), static_cast<size_t>(att_scratch));
  };
  auto q_row = [&](int64_t t) { return q.subspan(static_cast<size_t>(t * qd), static_cast<size_t>(qd)); };
  auto att_row = [&](int64_t t) { return att.subspan(static_cast<size_t>(t * qd), static_cast<size_t>(qd)); };
  auto blocks = [&](int64_t t) { return kv.block_table(batch.seq_ids[static_cast<size_t>(t)])->blocks(); };
  const int64_t max_ctx = *std::max_element(s_.n_ctx.begin(), s_.n_ctx.begin() + n);
  const int64_t n_seg = attention_segments(max_ctx);
  // Too few (token, KV head) pairs to keep every thread busy on a long context: split each
  // one's keys into segments as well (Flash-Decoding). Same bits either way (attention.h).
  if (n * kvh >= 2 * pool_->size() || n_seg == 1) {
    pool_->parallel_for(n * kvh, [&](int64_t task, int thread) {
      const int64_t t = task / kvh, g = task % kvh;
      attention(q_row(t), c.n_heads, view, blocks(t), s_.n_ctx[static_cast<size_t>(t)], scale, att_row(t),
                thread_scratch(thread), g, g + 1, isa_);
    });
    return;
  }
  const int64_t part = attention_partial_floats(c.n_heads / kvh, hd);
  if (static_cast<int64_t>(s_.att_part.size()) < n * kvh * n_seg * part) {
    s_.att_part.resize(static_cast<size_t>(n * kvh * n_seg * part));
  }
  auto partials = [&](int64_t t, int64_t g) {
    return std::span<float>(s_.att_part).subspan(static_cast<size_t>((t * kvh + g) * n_seg * part),
                                                 static_cast<size_t>(n_seg * part));
  };
  pool_->parallel_for(n * kvh * n_seg, [&](int64_t task, int thread) {
    const int64_t t = task / (kvh * n_seg), g = task / n_seg % kvh, seg = task % n_seg;
    const int64_t n_ctx = s_.n_ctx[static_cast<size_t>(t)];
    if (seg >= attention_segments(n_ctx)) return;
    attention_segment(q_row(t), c.n_heads, view, blocks(t), n_ctx, scale, g, seg,
                      partials(t, g).subspan(static_cast<size_t>(seg * part), static_cast<size_t>(part)),
                      thread_scratch(thread), isa_);
  });
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < kvh; ++g) {
      attention_merge(partials(t, g), attention_segments(s_.n_ctx[static_cast<size_t>(t)]), c.n_heads, hd, kvh, g,
                      att_row(t));
    }
  }
}

void Model::forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) {
  validate(batch, kv);
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t n_want =
      std::count_if(batch.want_logits.begin(), batch.want_logits.end(), [](uint8_t w) { return w != 0; });
  logits.assign(static_cast<size_t>(n_want * c.n_vocab), 0.f);
  if (n == 0) return;
  prepare_scratch(n);

  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.ffn_dim;
  // Sub-spans of the scratch buffers sized for this batch.
  auto rows = [n](std::vector<float>& v, int64_t width) { return std::span<float>(v.data(), static_cast<size_t>(n * width)); };
  auto row = [](std::span<float> m, int64_t t, int64_t width) { return m.subspan(static_cast<size_t>(t * width), static_cast<size_t>(width)); };
  std::span<float> x = rows(s_.x, dim), xb = rows(s_.xb, dim), q = rows(s_.q, qd), k = rows(s_.k, kvd),
                   v = rows(s_.v, kvd), att = rows(s_.att, qd), proj = rows(s_.proj, dim),
                   gate = rows(s_.gate, ffn), up = rows(s_.up, ffn), cs = rows(s_.rope_cs, c.rope_dim);

  RopeParams rope;
  rope.style = c.rope_style;
  rope.rope_dim = c.rope_dim;
  rope.freq_base = c.rope_freq_base;
  rope.freq_scale = c.rope_freq_scale;
  rope.freq_factors = c.rope_freq_factors;
  for (int64_t t = 0; t < n; ++t) {
    const SeqId seq = batch.seq_ids[static_cast<size_t>(t)];
    const int64_t pos = batch.positions[static_cast<size_t>(t)];
    s_.kv_rows[static_cast<size_t>(t)] = kv.row_of(seq, pos);
    s_.n_ctx[static_cast<size_t>(t)] = pos + 1;
    rope_angles(pos, rope, row(cs, t, c.rope_dim));
    token_embd_.dequantize_row_to(batch.tokens[static_cast<size_t>(t)], row(x, t, dim));
  }

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    // Attention block.
    for (int64_t t = 0; t < n; ++t) rmsnorm(row(x, t, dim), L.attn_norm, c.rms_eps, row(xb, t, dim));
    matmul(L.wq, xb, q, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    matmul(L.wk, xb, k, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    matmul(L.wv, xb, v, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    for (int64_t t = 0; t < n; ++t) {
      if (c.qkv_bias) {
        add_in_place(row(q, t, qd), L.q_bias);
        add_in_place(row(k, t, kvd), L.k_bias);
        add_in_place(row(v, t, kvd), L.v_bias);
      }
      rope_apply(row(q, t, qd), c.n_heads, c.head_dim, rope, row(cs, t, c.rope_dim));
      rope_apply(row(k, t, kvd), c.n_kv_heads, c.head_dim, rope, row(cs, t, c.rope_dim));
      kv.write_row(l, s_.kv_rows[static_cast<size_t>(t)], row(k, t, kvd), row(v, t, kvd));
    }
    // Every token's K/V of this layer is in the cache before anyone attends, so a prompt chunk
    // sees its own earlier tokens.
    attention_layer(batch, kv, l, q, att);
    matmul(L.wo, att, proj, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    for (int64_t t = 0; t < n; ++t) add_in_place(row(x, t, dim), row(proj, t, dim));

    // Feed-forward block (SwiGLU).
    for (int64_t t = 0; t < n; ++t) rmsnorm(row(x, t, dim), L.ffn_norm, c.rms_eps, row(xb, t, dim));
    matmul(L.w_gate, xb, gate, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    matmul(L.w_up, xb, up, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    swiglu(gate, up, gate);
    matmul(L.w_down, gate, proj, n, s_.row, pool_.get(), isa_, act_, s_.act_q8);
    for (int64_t t = 0; t < n; ++t) add_in_place(row(x, t, dim), row(proj, t, dim));
  }

  // Head: only the rows that want logits, packed in batch order.
  int64_t w = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (batch.want_logits[static_cast<size_t>(t)] == 0) continue;
    rmsnorm(row(x, t, dim), output_norm_, c.rms_eps, row(xb, w, dim));
    ++w;
  }
  if (n_want > 0) {
    matmul(output_, xb.first(static_cast<size_t>(n_want * dim)), logits, n_want, s_.row, pool_.get(), isa_, act_, s_.act_q8);
  }

  for (int64_t t = 0; t < n; ++t) {
    const SeqId seq = batch.seq_ids[static_cast<size_t>(t)];
    kv.set_seq_length(seq, batch.positions[static_cast<size_t>(t)] + 1);
  }
}

}  // namespace peregrine
