#include "model/model_slice.h"

#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Cut point r of [0, n) into `parts` pieces, rounded down to a multiple of `align` (the last cut
// is n itself).
int64_t cut(int64_t n, int64_t parts, int64_t r, int64_t align) {
  if (r >= parts) return n;
  return r * (n / align) / parts * align;
}

// Rank r's first query head of h over tp ranks.
int64_t head_begin(int64_t h, int64_t tp, int64_t r) { return r * h / tp; }

std::optional<std::string> attention_refusal(const SplitDims& d, int64_t tp, int64_t column_block) {
  const int64_t h = d.n_heads, kvh = d.n_kv_heads;
  if (h > 0 && h % tp != 0) return "tensor parallelism: " + str(h) + " attention heads do not divide by " + str(tp);
  if (kvh > 0 && kvh % tp != 0 && tp % kvh != 0) {
    return "tensor parallelism: " + str(kvh) + " KV heads cannot be split across " + str(tp) +
           " ranks without splitting a GQA group (one must divide the other)";
  }
  for (int64_t r = 1; h > 0 && r < tp; ++r) {
    const int64_t column = head_begin(h, tp, r) * d.head_dim;
    if (column % column_block != 0) {
      return "tensor parallelism: the output projection's columns would be cut at " + str(column) +
             ", inside a quantization block of " + str(column_block);
    }
  }
  return std::nullopt;
}

std::optional<std::string> expert_refusal(const SplitDims& d, const SplitGrid& g) {
  const int64_t e = d.n_experts;
  if (g.ep > 0 && e == 0) return "expert parallelism (--ep) needs a mixture-of-experts model; this one is dense";
  if (g.ep > 0 && e % g.ep != 0) {
    return "expert parallelism: " + str(e) + " experts do not divide by " + str(g.ep) + " ranks";
  }
  if (g.ep > 0 && g.tp % g.ep != 0) {
    return "expert parallelism: " + str(g.tp) + " tensor-parallel ranks do not divide into groups of " + str(g.ep);
  }
  if (e > 0 && g.tp > 1 && g.ep == 0) {
    return "tensor parallelism: a mixture-of-experts model's experts are not cut into slices; spread them over "
           "the ranks with --ep";
  }
  return std::nullopt;
}

}  // namespace

SplitDims split_dims(const ModelConfig& c) {
  return {c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.n_vocab, c.moe.n_experts()};
}

std::optional<std::string> split_refusal(const SplitDims& d, const SplitGrid& g, int64_t column_block) {
  if (g.tp < 1 || g.pp < 1 || g.ep < 0) {
    return "model split: " + str(g.tp) + " tensor-parallel ranks, " + str(g.pp) + " stages";
  }
  if (d.n_layers > 0 && d.n_layers < g.pp) {
    return "pipeline parallelism: " + str(g.pp) + " stages need at least as many layers; this model has " +
           str(d.n_layers);
  }
  if (auto why = attention_refusal(d, g.tp, column_block)) return why;
  for (int64_t r = 0; d.ffn_dim > 0 && r < g.tp; ++r) {
    if (cut(d.ffn_dim, g.tp, r, column_block) >= cut(d.ffn_dim, g.tp, r + 1, column_block)) {
      return "tensor parallelism: a feed-forward width of " + str(d.ffn_dim) + " leaves rank " + str(r) +
             " nothing when cut in blocks of " + str(column_block) + " across " + str(g.tp) + " ranks";
    }
  }
  if (d.n_vocab > 0 && d.n_vocab < g.tp) {
    return "tensor parallelism: a vocabulary of " + str(d.n_vocab) + " leaves ranks without output rows across " +
           str(g.tp);
  }
  return expert_refusal(d, g);
}

ModelSlice stage_slice(int64_t n_layers, const SplitGrid& g, int64_t stage, int64_t tp_rank) {
  if (auto why = split_refusal({.n_layers = n_layers}, {.tp = 1, .pp = g.pp})) throw UsageError(*why);
  ModelSlice s;
  s.layer_begin = stage * n_layers / g.pp;
  s.layer_end = (stage + 1) * n_layers / g.pp;
  s.tp_rank = tp_rank;
  s.tp_size = g.tp;
  s.expert_parallel = g.ep > 0;
  return s;
}

SliceShape resolve_slice(const ModelConfig& c, const ModelSlice& s, int64_t column_block) {
  SliceShape out;
  out.layer_begin = s.layer_begin;
  out.layer_end = s.layer_end < 0 ? c.n_layers : s.layer_end;
  if (out.layer_begin < 0 || out.layer_end > c.n_layers || out.layer_begin >= out.layer_end) {
    throw UsageError("model slice: layers [" + str(s.layer_begin) + ", " + str(out.layer_end) +
                     ") are not a non-empty range of the model's " + str(c.n_layers));
  }
  if (s.tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size) {
    throw UsageError("model slice: tensor-parallel rank " + str(s.tp_rank) + " of " + str(s.tp_size));
  }
  out.first_stage = out.layer_begin == 0;
  out.last_stage = out.layer_end == c.n_layers;
  out.tensor_split = s.tp_size > 1;
  if (auto why = split_refusal(split_dims(c), s.grid(), column_block)) throw UsageError(*why);
  const int64_t tp = s.tp_size, r = s.tp_rank;
  out.head_begin = head_begin(c.n_heads, tp, r);
  out.head_end = head_begin(c.n_heads, tp, r + 1);
  if (c.n_kv_heads % tp == 0) {  // whole GQA groups per rank
    out.kv_head_begin = r * c.n_kv_heads / tp;
    out.kv_head_end = (r + 1) * c.n_kv_heads / tp;
  } else {  // fewer KV heads than ranks: each rank keeps the one its heads read
    out.kv_head_begin = out.head_begin / c.gqa_group();
    out.kv_head_end = out.kv_head_begin + 1;
  }
  out.ffn_begin = cut(c.ffn_dim, tp, r, column_block);
  out.ffn_end = cut(c.ffn_dim, tp, r + 1, column_block);
  out.vocab_begin = r * c.n_vocab / tp;
  out.vocab_end = (r + 1) * c.n_vocab / tp;
  out.expert_end = c.moe.n_experts();
  if (s.expert_parallel) {
    out.expert_begin = r * c.moe.n_experts() / tp;
    out.expert_end = (r + 1) * c.moe.n_experts() / tp;
    out.expert_split = tp > 1;
    out.ep_rank = r;
    out.ep_size = tp;
  }
  return out;
}

}  // namespace peregrine
