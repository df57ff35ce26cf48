#pragma once
// The transformer forward pass (llama and qwen2 architectures) on the CPU, in f32, over a paged
// KV cache. Weights stay in the mapped file in whatever type they were stored (F32/F16/BF16/
// Q8_0/Q4_0/Q4_K/Q6_K, mixed per tensor) and are dequantized row by row as matmuls need them.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "util/batch.h"
#include "format/model_file.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/config.h"

namespace peregrine {

// Not thread-safe: forward() reuses activation buffers held in the Model, so one call at a time.
// Inside forward(), matmuls split their output rows and attention its (token, KV head) pairs
// among the Model's own persistent threads; results do not depend on the thread count.
class Model {
 public:
  // Reads the config and binds and validates every tensor's shape and type (FormatError).
  // Computes on physical_core_count() threads and the active_isa() kernel path.
  explicit Model(ModelFile file);
  // The same on n_threads threads (n_threads >= 1, else UsageError).
  Model(ModelFile file, int n_threads);
  // `act` chooses how activations meet Q8_0/Q4_0 weights (kernels/matmul.h): Q8 (the default,
  // llama.cpp's arithmetic and several times faster) or F32 (exact; tests against the
  // double-precision reference use it).
  Model(ModelFile file, int n_threads, Activations act);

  const ModelConfig& config() const { return config_; }
  int n_threads() const { return pool_->size(); }
  Isa isa() const { return isa_; }
  Activations activations() const { return act_; }
  const ModelFile& file() const { return file_; }

  // For each token i: embed, run all layers writing its K/V into `kv` at (seq_ids[i],
  // positions[i]) and attending causally over positions [0, positions[i]] of its own sequence
  // (the earlier positions already in the cache or earlier in this same batch).
  // Every sequence in the batch must already have `kv.reserve`d room for its positions; within a
  // sequence, positions must be consecutive and start at or before kv.seq_length(seq), which
  // becomes the last position + 1.
  // `logits` is resized to [rows with want_logits][n_vocab], in batch order.
  // Throws UsageError on invalid input (token id out of range, position >= context length,
  // missing reservation, positions out of order, a cache shaped for another model).
  // Each row's results are bit-identical whatever else shares the batch.
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits);

 private:
  struct Layer {
    std::vector<float> attn_norm;  // [dim]
    TensorView wq;                 // {dim, q_dim}
    TensorView wk;                 // {dim, kv_dim}
    TensorView wv;                 // {dim, kv_dim}
    TensorView wo;                 // {q_dim, dim}
    std::vector<float> q_bias;     // [q_dim]  (qwen2), else empty
    std::vector<float> k_bias;     // [kv_dim] (qwen2), else empty
    std::vector<float> v_bias;     // [kv_dim] (qwen2), else empty
    std::vector<float> ffn_norm;   // [dim]
    TensorView w_gate;             // {dim, ffn_dim}
    TensorView w_up;               // {dim, ffn_dim}
    TensorView w_down;             // {ffn_dim, dim}
  };
  // Activations for a batch of n tokens, grown on demand and reused across calls.
  struct Scratch {
    std::vector<float> x;         // [n][dim] residual stream
    std::vector<float> xb;        // [n][dim] normed input of a sub-block
    std::vector<float> q;         // [n][q_dim]
    std::vector<float> k;         // [n][kv_dim]
    std::vector<float> v;         // [n][kv_dim]
    std::vector<float> att;       // [n][q_dim] attention output
    std::vector<float> proj;      // [n][dim] output of wo / w_down
    std::vector<float> gate;      // [n][ffn_dim]
    std::vector<float> up;        // [n][ffn_dim]
    std::vector<float> rope_cs;   // [n][rope_dim / 2][2]
    std::vector<float> row;       // [matmul_scratch_floats(max row length, threads)] dequantized rows
    std::vector<Q8Block> act_q8;  // [n][max row length / 32] quantized matmul inputs
    std::vector<float> att_part;  // [n][n_kv_heads][segments][partial] Flash-Decoding partials
    std::vector<float> att_tmp;   // [threads][attention_scratch_floats] attention kernel scratch
    std::vector<int64_t> kv_rows; // [n] physical cache row of each token
    std::vector<int64_t> n_ctx;   // [n] positions attended by each token (pos + 1)
    std::vector<std::pair<SeqId, int64_t>> seq_last;  // validation: last position per sequence
  };

  void validate(const Batch& batch, const KvCache& kv);
  void prepare_scratch(int64_t n);
  // Attention of every batch row over its sequence's cache in layer `layer` (K/V already
  // written). q, att: [n][q_dim].
  void attention_layer(const Batch& batch, KvCache& kv, int64_t layer, std::span<const float> q,
                       std::span<float> att);

  ModelFile file_;
  ModelConfig config_;
  TensorView token_embd_;         // {dim, n_vocab}
  TensorView output_;             // {dim, n_vocab}; token_embd when tied
  std::vector<float> output_norm_;// [dim]
  std::vector<Layer> layers_;
  Scratch s_;
  Isa isa_;
  Activations act_ = Activations::Q8;
  std::unique_ptr<ThreadPool> pool_;  // behind a pointer so Model stays movable
};

}  // namespace peregrine
