#pragma once
// The transformer forward pass (llama, qwen2, and the mixtures of experts Mixtral, qwen2moe and
// qwen3moe) over a paged KV cache, expressed as whole-batch operations on an ExecutionContext
// (backend/). Weights stay in the mapped file in whatever type they were stored
// (F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q6_K, mixed per tensor).
//
// A Model may be a part of the whole (ModelSlice): a range of layers (a pipeline stage) and/or
// one rank's slice of every weight matrix (tensor parallelism), or of the experts (expert
// parallelism). It binds only the bytes of its
// part, so the pages of the rest of the mapped file are never read.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/execution_context.h"
#include "format/model_file.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/model_slice.h"
#include "util/batch.h"

namespace peregrine {

// Not thread-safe: forward() reuses activation buffers held in the Model, so one call at a time.
// Each row's results are bit-identical whatever else shares the batch and whatever the context's
// thread count.
class Model {
 public:
  // The part `slice` of the model, computing on `context` (shared with other models).
  // Throws FormatError for a bad file, UsageError for a slice the model cannot be cut into.
  Model(ModelFile file, std::shared_ptr<ExecutionContext> context, ModelSlice slice = {});
  // Not copyable: weight views may point into buffers the model owns (contiguous_copy); a move
  // keeps those buffers where they are.
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

  const ModelConfig& config() const { return config_; }
  const ModelFile& file() const { return file_; }
  const ModelSlice& slice() const { return slice_; }
  const SliceShape& shape() const { return shape_; }
  ExecutionContext& context() const { return *ctx_; }
  const std::shared_ptr<ExecutionContext>& shared_context() const { return ctx_; }
  // What this model's KV cache must hold: its layers and its KV heads.
  KvShape kv_shape() const { return {shape_.n_layers(), shape_.n_kv_heads(), config_.head_dim}; }
  // A KV cache for this model: a block pool over storage of kv_shape() its context allocates.
  KvCache make_kv_cache(KvType type, int64_t n_blocks, int32_t block_size = 16) const {
    return KvCache(ctx_->allocate_kv({kv_shape(), type, n_blocks, block_size}));
  }

  // The whole model (first and last stage, no tensor split): for each token i, embed, run all
  // layers writing its K/V into `kv` at (seq_ids[i], positions[i]) and attending causally over
  // positions [0, positions[i]] of its own sequence (the earlier positions already in the cache
  // or earlier in this same batch).
  // Every sequence in the batch must already have room for its positions (kv.pool().reserve); within a
  // sequence, positions must be consecutive, and the cache must hold K/V for every position before
  // the first (the caller's record: the engine's Sequence::n_computed; the cache keeps none).
  // `logits` is resized to [rows with want_logits][n_vocab], in batch order: the one copy of
  // activations to the host a step needs (ExecutionContext::copy_to_host).
  // Throws UsageError on invalid input (token id out of range, position >= context length,
  // missing reservation, positions out of order, a cache shaped for another model).
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits);

  // Tensor-parallel slices: how the partial sums of wo and w_down ([n][dim], copied to the host
  // for it and back) are added across the ranks, in place. It must give every rank the same bits
  // (a fixed reduction order). Required when shape().tensor_split.
  using AllReduce = std::function<void(std::span<float>)>;
  void set_all_reduce(AllReduce fn) { all_reduce_ = std::move(fn); }
  // Expert-parallel slices: rank r sends send_counts[j] floats (consecutive in `send`, in rank
  // order) to each rank j and receives recv_counts[j] floats from each (consecutive in `recv`), over
  // the ranks sharing the experts; both in host memory. Required when shape().expert_split.
  using AllToAll = std::function<void(std::span<const float> send, std::span<const int64_t> send_counts,
                                      std::span<float> recv, std::span<const int64_t> recv_counts)>;
  void set_all_to_all(AllToAll fn) { all_to_all_ = std::move(fn); }

  // A pipeline stage's part of forward(): the first stage embeds batch.tokens (hidden_in empty),
  // any other copies in the previous stage's hidden states (hidden_in: [n][dim], host memory);
  // the stage's layers run, and their output stays in the model's context memory for
  // compute_logits or copy_hidden.
  void forward_layers(const Batch& batch, KvCache& kv, std::span<const float> hidden_in = {});
  // The last forward_layers' output ([n][dim]) copied to the host, for the next pipeline stage.
  void copy_hidden(std::vector<float>& out) const;
  // The last stage's head on the last forward_layers' output (the same batch): final norm and
  // output matrix for the rows with want_logits. logits: [rows with want_logits][vocab rows of
  // this slice], copied to the host.
  void compute_logits(const Batch& batch, std::vector<float>& logits);
  // The final hidden states the last compute_logits (or forward) multiplied by the output matrix,
  // copied to the host: [rows with want_logits][dim], after the final norm. Prediction heads
  // (speculative decoding) read them.
  void copy_logits_hidden(std::vector<float>& out) const;
  // The output matrix ({dim, vocab rows of this slice}), for heads that share it.
  const TensorView& output_matrix() const { return output_; }

  // Mixture-of-experts models: how many experts the forward passes ran, summed over layers and
  // calls (an expert counts once per layer and call however many tokens it served), for
  // comparing with the expected E·(1 − (1 − k/E)^B) distinct experts of a B-token step.
  struct MoeStats {
    int64_t layer_steps = 0;  // (layer, forward call) pairs
    int64_t experts_run = 0;  // distinct experts over those pairs
  };
  const MoeStats& moe_stats() const { return moe_stats_; }
  void reset_moe_stats() { moe_stats_ = {}; }

 private:
  struct Layer {
    std::vector<float> attn_norm;  // [dim]
    TensorView wq;                 // {dim, local q_dim}   rows of this slice's query heads
    TensorView wk;                 // {dim, local kv_dim}  rows of this slice's KV heads
    TensorView wv;                 // {dim, local kv_dim}
    TensorView wo;                 // {local q_dim, dim}   columns of this slice's query heads
    std::vector<float> q_bias;     // [local q_dim]  (qwen2), else empty
    std::vector<float> k_bias;     // [local kv_dim] (qwen2), else empty
    std::vector<float> v_bias;     // [local kv_dim] (qwen2), else empty
    std::vector<float> ffn_norm;   // [dim]
    TensorView w_gate;             // {dim, local ffn}
    TensorView w_up;               // {dim, local ffn}
    TensorView w_down;             // {local ffn, dim}     columns of this slice's ffn range
    std::vector<float> q_norm;     // [head_dim] (qwen3moe), else empty
    std::vector<float> k_norm;     // [head_dim] (qwen3moe, gemma3), else empty
    std::vector<float> post_attn_norm;  // [dim] (gemma2/3: post_attention_norm), else empty
    std::vector<float> post_ffn_norm;   // [dim] (gemma2/3: post_ffw_norm), else empty
    // Mixture of experts (config().is_moe(), instead of w_gate / w_up / w_down):
    TensorView router;             // {dim, E}                ffn_gate_inp
    TensorView gate_exps;          // {dim, expert_ffn, E held}  (expert parallelism: E / T)
    TensorView up_exps;            // {dim, expert_ffn, E held}
    TensorView down_exps;          // {expert_ffn, dim, E held}
    TensorView shared_gate;        // {dim, shared_ffn}       qwen2moe's shared expert
    TensorView shared_up;          // {dim, shared_ffn}
    TensorView shared_down;        // {shared_ffn, dim}
    TensorView shared_gate_inp;    // {dim, 1}                its sigmoid gate (a 1-D tensor as one row)
  };
  // Activations for a batch of n tokens: buffers the context allocated (only its operations touch
  // them; util/buffer.h), grown on demand and reused across calls. Beside them, the host metadata
  // the operations take as arguments (cache rows, block tables, expert ids, grouped rows).
  struct Scratch {
    Buffer xb;                     // [n][dim] normed input of a sub-block; the head's normed rows
    Buffer q;                      // [n][local q_dim]
    Buffer k;                      // [n][local kv_dim]
    Buffer v;                      // [n][local kv_dim]
    Buffer att;                    // [n][local q_dim] attention output
    Buffer proj;                   // [n][dim] output of wo / w_down
    Buffer gate;                   // [n][local ffn]
    Buffer up;                     // [n][local ffn]
    Buffer rope_cs;                // [n][rope_dim / 2][2]
    Buffer rope_cs_swa;            // [n][rope_dim / 2][2] sliding layers' angles when their RoPE differs (gemma3)
    Buffer hidden;                 // [n][dim] the residual stream (forward_layers' output)
    Buffer logits;                 // [rows with want_logits][local vocab]
    std::vector<int64_t> kv_rows;  // [n] physical cache row of each token
    std::vector<int64_t> n_ctx;    // [n] positions attended by each token (pos + 1)
    std::vector<std::span<const BlockId>> tables;     // [n] block table of each token's sequence
    std::vector<std::pair<SeqId, int64_t>> seq_last;  // validation: last position per sequence
    std::vector<int32_t> logit_rows;                  // [rows with want_logits] their batch rows
    std::vector<float> reduce;  // [n][dim] tensor parallelism: partial sums on their way across ranks
    // Mixture of experts (m = n * k grouped rows, ordered by expert, then token)
    Buffer router;                       // [n][E] router logits
    std::vector<int32_t> experts;        // [n][k] each token's experts, ascending
    std::vector<float> weights;          // [n][k] their weights
    std::vector<int64_t> expert_rows;    // [E + 1] first grouped row of each (held) expert
    std::vector<int32_t> pair_slot;      // [n][k] grouped row of each (token, expert) pair; -1 if not held
    std::vector<int32_t> grouped_token;  // [m] the token of each grouped row
    std::vector<float> grouped_weight;   // [m] its router weight
    Buffer xg;                           // [m][dim] grouped inputs
    Buffer yg;                           // [m][dim] grouped expert outputs
    Buffer shared_out;                   // [n][dim] the shared expert's output
    Buffer shared_logit;                 // [n] its gate
    // Expert parallelism (combine_across_ranks): expert outputs on their way to their tokens'
    // ranks, then the combined rows on their way to every rank, in the context (gathered, received)
    // and on the host (what the all-to-all sends and receives).
    Buffer ep_out, ep_in;
    std::vector<float> ep_send, ep_recv;
    std::vector<int32_t> ep_send_slots;                   // [sent pairs] the grouped row of each, in send order
    std::vector<int64_t> ep_send_counts, ep_recv_counts;  // [ep_size] floats
    std::vector<int32_t> ep_rows;        // [received pairs] the token (of this rank's range) of each
    std::vector<float> ep_weights;       // [received pairs] its router weight
  };

  // The first `floats` floats of `b`, reallocated by the context (contents lost) when shorter.
  std::span<float> grow(Buffer& b, int64_t floats);
  // The first `floats` floats of `b`, already grown.
  static std::span<float> view(const Buffer& b, int64_t floats);
  // Tensor parallelism: proj summed across the ranks (through the host).
  void reduce_across_ranks(std::span<float> proj);
  void bind_weights();
  void validate(const Batch& batch, const KvCache& kv);
  void prepare(const Batch& batch, const KvCache& kv);
  void attention_block(const Layer& L, int64_t layer, int64_t n, KvCache& kv, std::span<float> x);
  void ffn_block(const Layer& L, int64_t n, std::span<float> x);
  void moe_block(const Layer& L, int64_t n, std::span<float> x);  // model_moe.cpp
  void group_by_expert(int64_t n);                                 // model_moe.cpp
  void run_experts(const Layer& L, std::span<const float> xb, int64_t m);  // model_moe.cpp
  void shared_expert(const Layer& L, std::span<const float> xb, std::span<float> proj, int64_t n);
  void combine_across_ranks(const Layer& L, int64_t n, std::span<float> proj);  // model_moe.cpp
  void bind_moe(Layer& L, const std::string& prefix);              // model_weights.cpp
  TensorView contiguous_copy(const TensorView& slice);             // model_weights.cpp
  std::span<std::byte> owned_huge_pages(size_t bytes);             // model_weights.cpp
  TensorView in_kernel_type(const TensorView& w);                  // model_weights.cpp
  TensorView interleaved_copy(const TensorView& w, TensorType layout);  // model_weights.cpp
  void convert_to_kernel_types();                                  // model_weights.cpp

  ModelFile file_;
  ModelConfig config_;
  ModelSlice slice_;
  SliceShape shape_;
  std::shared_ptr<ExecutionContext> ctx_;
  RopeParams rope_;
  RopeParams rope_swa_;            // the sliding layers' RoPE (gemma3: base 10000, scale 1); else rope_
  TensorView token_embd_;          // {dim, n_vocab}; first stage only
  TensorView output_;              // {dim, local vocab}; last stage only (token_embd when tied)
  std::vector<float> output_norm_; // [dim]; last stage only
  std::vector<Layer> layers_;      // [shape.n_layers()]: layers [layer_begin, layer_end)
  // contiguous_copy's buffers (tensor-parallel wo, w_down) and in_kernel_type's (packed, F16 as BF16)
  std::vector<std::vector<std::byte>> owned_weights_;
  AllReduce all_reduce_;
  AllToAll all_to_all_;
  int64_t n_hidden_rows_ = 0;  // rows of the last forward_layers' output
  int64_t n_logits_rows_ = 0;  // rows of copy_logits_hidden()
  MoeStats moe_stats_;
  Scratch s_;
};

}  // namespace peregrine
