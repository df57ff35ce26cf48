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

void resolve_heads(const ModelConfig& c, const ModelSlice& s, int64_t column_block, SliceShape& out) {
  const int64_t h = c.n_heads, kvh = c.n_kv_heads, tp = s.tp_size, r = s.tp_rank;
  if (h % tp != 0) throw UsageError("tensor parallelism: " + str(h) + " attention heads do not divide by " + str(tp));
  out.head_begin = r * h / tp;
  out.head_end = (r + 1) * h / tp;
  if (kvh % tp == 0) {  // whole GQA groups per rank
    out.kv_head_begin = r * kvh / tp;
    out.kv_head_end = (r + 1) * kvh / tp;
  } else if (tp % kvh == 0) {  // fewer KV heads than ranks: each rank keeps the one its heads read
    out.kv_head_begin = out.head_begin / c.gqa_group();
    out.kv_head_end = out.kv_head_begin + 1;
  } else {
    throw UsageError("tensor parallelism: " + str(kvh) + " KV heads cannot be split across " + str(tp) +
                     " ranks without splitting a GQA group (one must divide the other)");
  }
  if ((out.head_begin * c.head_dim) % column_block != 0) {
    throw UsageError("tensor parallelism: the output projection's columns would be cut at " +
                     str(out.head_begin * c.head_dim) + ", inside a quantization block of " + str(column_block));
  }
}

void resolve_experts(const ModelConfig& c, const ModelSlice& s, SliceShape& out) {
  const int64_t e = c.moe.n_experts();
  out.expert_end = e;
  if (!s.expert_parallel) return;
  if (!c.is_moe()) throw UsageError("expert parallelism (--ep) needs a mixture-of-experts model; this one is dense");
  if (e % s.tp_size != 0) {
    throw UsageError("expert parallelism: " + str(e) + " experts do not divide by " + str(s.tp_size) + " ranks");
  }
  out.expert_begin = s.tp_rank * e / s.tp_size;
  out.expert_end = (s.tp_rank + 1) * e / s.tp_size;
  out.expert_split = s.tp_size > 1;
  out.ep_rank = s.tp_rank;
  out.ep_size = s.tp_size;
}

}  // namespace

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
  resolve_heads(c, s, column_block, out);
  out.ffn_begin = cut(c.ffn_dim, s.tp_size, s.tp_rank, column_block);
  out.ffn_end = cut(c.ffn_dim, s.tp_size, s.tp_rank + 1, column_block);
  if (out.ffn_begin >= out.ffn_end) {
    throw UsageError("tensor parallelism: a feed-forward width of " + str(c.ffn_dim) + " leaves rank " +
                     str(s.tp_rank) + " nothing when cut in blocks of " + str(column_block) + " across " +
                     str(s.tp_size) + " ranks");
  }
  resolve_experts(c, s, out);
  out.vocab_begin = s.tp_rank * c.n_vocab / s.tp_size;
  out.vocab_end = (s.tp_rank + 1) * c.n_vocab / s.tp_size;
  return out;
}

}  // namespace peregrine
