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
// The rules a split must keep are in one function, split_refusal, which the models a process
// loads (resolve_slice) and the planner for layouts we do not have (dist/plan.cpp) both obey.
// A new way of splitting a model across processes starts here: its rule in split_refusal, its
// ranges in resolve_slice, and model_weights.cpp binds exactly those bytes.
#include <cstdint>
#include <optional>
#include <string>

#include "model/config.h"

namespace peregrine {

// A grid of ranks: tp tensor-parallel ranks per stage, pp pipeline stages, and with expert
// parallelism the experts spread over ep of a stage's ranks (the engine spreads them over all
// of them: ep = tp); ep = 0: no expert parallelism.
struct SplitGrid {
  int64_t tp = 1, pp = 1;
  int64_t ep = 0;
};

struct ModelSlice {
  int64_t layer_begin = 0;
  int64_t layer_end = -1;  // -1 = every layer to the end
  int64_t tp_rank = 0;
  int64_t tp_size = 1;
  bool expert_parallel = false;  // MoE: spread whole experts over the tp ranks (instead of cutting each)

  bool whole() const { return layer_begin == 0 && layer_end < 0 && tp_size == 1; }
  // The stage's grid of tensor-parallel ranks this slice is one of.
  SplitGrid grid() const { return {tp_size, 1, expert_parallel ? tp_size : 0}; }
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

// The sizes a split is checked against: a loaded model's (split_dims) or a planned one's
// (dist/plan.h), where 0 means unknown and its rules are not checked.
struct SplitDims {
  int64_t n_layers = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t ffn_dim = 0;    // feed-forward rows (gate/up), cut into tp ranges
  int64_t n_vocab = 0;    // output-head rows, cut into tp ranges
  int64_t n_experts = 0;  // 0: a dense feed-forward
};
SplitDims split_dims(const ModelConfig& config);

// The split rules, all of them: why a model of `dims` cannot be cut over `grid`, or nullopt when
// every rank's slice is well formed:
//   - pipeline: at least one layer per stage;
//   - attention: the query heads divide by tp; the KV heads divide by tp (whole GQA groups per
//     rank) or tp by the KV heads (each rank keeps the one its heads read);
//   - columns (wo's heads, w_down's rows) cut on multiples of `column_block` (the largest block
//     size among those matrices' types), and no rank left without feed-forward rows;
//   - the output head: at least one vocabulary row per rank;
//   - experts: spread whole (ep > 0) only on a mixture of experts, in equal shares, over a
//     divisor of tp; a mixture of experts split over tp > 1 ranks must spread them (its experts
//     are not cut into slices).
std::optional<std::string> split_refusal(const SplitDims& dims, const SplitGrid& grid, int64_t column_block = 1);

// Rank (stage, tp_rank)'s slice of a model of `n_layers` split over `grid`: stage s holds the
// layers [s * L / P, (s + 1) * L / P). Throws UsageError when there are fewer layers than stages.
ModelSlice stage_slice(int64_t n_layers, const SplitGrid& grid, int64_t stage, int64_t tp_rank);

// Resolves `slice` for `config`; cuts of input columns (wo's heads, w_down's feed-forward range)
// must be multiples of `column_block` (the largest block size among those matrices' types).
// Throws UsageError naming the reason when the model cannot be cut that way: a layer range out
// of bounds, or split_refusal's reason for the grid of tp_size ranks the slice is one of.
SliceShape resolve_slice(const ModelConfig& config, const ModelSlice& slice, int64_t column_block = 1);

}  // namespace peregrine
