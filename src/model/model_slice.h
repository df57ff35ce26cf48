#pragma once
// Which part of a model one Model object holds: a range of layers (pipeline parallelism) and one
// rank's share of every layer (tensor parallelism, Megatron-style):
//   - attention: the query heads [head_begin, head_end) and the KV heads they read; GQA groups
//     stay whole (n_kv_heads divisible by tp_size), or, with fewer KV heads than ranks (MQA), each
//     rank keeps the KV heads its query heads read (replicated);
//   - wq, wk, wv and their biases: those heads' output rows (column-parallel); wo: those heads'
//     input columns (row-parallel: partial sums to be added across ranks);
//   - gate/up: the rows [ffn_begin, ffn_end); down: the same input columns (row-parallel);
//   - the output head: the vocabulary rows [vocab_begin, vocab_end) (vocabulary-parallel);
//   - a mixture of experts with expert parallelism: the whole experts [expert_begin, expert_end)
//     (E / tp_size each; the router and a shared expert are replicated), and the tokens
//     [token_begin(n), token_end(n)) of each step whose outputs this rank puts together.
// Cut points of input columns fall on whole quantization blocks (256 covers every type).
// A new way of splitting a model across processes starts here: give the slice its ranges, and
// model_weights.cpp binds exactly those bytes.
#include <cstdint>

#include "model/config.h"

namespace peregrine {

struct ModelSlice {
  int64_t layer_begin = 0;
  int64_t layer_end = -1;  // -1 = every layer to the end
  int64_t tp_rank = 0;
  int64_t tp_size = 1;
  bool expert_parallel = false;  // MoE: spread whole experts over the tp ranks (instead of cutting each)

  bool whole() const { return layer_begin == 0 && layer_end < 0 && tp_size == 1; }
};

// The ranges a ModelSlice resolves to for one model.
struct SliceShape {
  int64_t layer_begin = 0, layer_end = 0;
  int64_t head_begin = 0, head_end = 0;        // query heads
  int64_t kv_head_begin = 0, kv_head_end = 0;  // KV heads
  int64_t ffn_begin = 0, ffn_end = 0;          // feed-forward rows
  int64_t vocab_begin = 0, vocab_end = 0;      // output-head rows
  int64_t expert_begin = 0, expert_end = 0;    // experts held (MoE; all of them unless expert_split)
  bool first_stage = true;                     // embeds tokens
  bool last_stage = true;                      // owns the final norm and the output head
  bool tensor_split = false;                   // tp_size > 1: wo / w_down give partial sums
  bool expert_split = false;                   // expert parallelism over tp_size > 1 ranks
  int64_t ep_rank = 0, ep_size = 1;            // this rank among the ranks sharing the experts

  int64_t n_layers() const { return layer_end - layer_begin; }
  int64_t n_heads() const { return head_end - head_begin; }
  int64_t n_kv_heads() const { return kv_head_end - kv_head_begin; }
  int64_t ffn() const { return ffn_end - ffn_begin; }
  int64_t vocab() const { return vocab_end - vocab_begin; }
  int64_t n_experts() const { return expert_end - expert_begin; }
  // Expert parallelism: the rank holding expert e, and the tokens [token_begin(n, r),
  // token_begin(n, r + 1)) of an n-token step whose expert outputs rank r adds up.
  int64_t expert_owner(int64_t e) const { return e / n_experts(); }
  int64_t token_begin(int64_t n, int64_t rank) const { return rank * n / ep_size; }
};

// Resolves `slice` for `config`; cuts of input columns (wo's heads, w_down's feed-forward range)
// must be multiples of `column_block` (the largest block size among those matrices' types).
// Throws UsageError naming the reason when the model cannot be cut that way (layer range out of
// bounds, heads not divisible by tp_size, GQA groups that would be split, a cut inside a block).
SliceShape resolve_slice(const ModelConfig& config, const ModelSlice& slice, int64_t column_block = 1);

}  // namespace peregrine
