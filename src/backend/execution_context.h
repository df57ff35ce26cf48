#pragma once
// The execution context: everything a model's forward pass asks of the machine, as whole-batch
// operations. One context per process (or per device) is shared by every model in it, so a target
// and a draft model take turns on the same threads instead of fighting over the cores.
//
// The model never touches activation memory itself: it asks the context to embed, normalize,
// multiply, rotate, write the KV cache and attend, on [n_tokens][width] row-major f32 buffers the
// context allocated (allocate; the spans below that hold activations are views of them) and moves
// activations to and from the host only through copy_to_host / copy_from_host. Host metadata
// (token ids, positions, cache rows, block tables, expert ids and offsets, grouped row indices
// and their weights) stays in host memory and is passed as arguments: a device context copies
// what it needs itself. That is the seam a second backend implements (docs/design/backends.md):
//   - CpuContext (cpu_context.h) runs the kernels/ on a thread pool, with one ISA path chosen
//     at construction (kernels/kernel_table.h) and per-thread scratch it owns.
//   - GuardedContext (guarded_context.h) runs the scalar kernels on memory the host cannot read
//     outside its calls: the test that the model and engine keep to the seam.
//   - A device backend (CUDA) would hold the weights it was handed in device memory (prepared
//     once, keyed by the TensorView's bytes), take the spans below as device buffers it
//     allocated, keep the KV blocks in device memory under the same block tables, and copy back
//     only the logits rows that are sampled.
//   - A remote shard would forward each call to the process that holds those weights.
// Contexts are not thread-safe: one call at a time (the engine thread drives every model).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/moe_routing.h"
#include "format/model_file.h"
#include "kernels/attention.h"
#include "kernels/machine_probe.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kv/kv_cache.h"
#include "util/batch.h"
#include "util/buffer.h"

namespace peregrine {

// One weight of a group of products that share their input (ExecutionContext::matmuls).
// w: GGUF shape {n_in, n_out}; y: [n][n_out]
struct MatmulOutput {
  const TensorView* w;
  std::span<float> y;
};

// How long to measure what a context's hardware allows (ExecutionContext::measure_bounds): bench
// takes the defaults, serve's live view a quick look (a fraction of a second).
struct BoundsProbe {
  int64_t bandwidth_bytes = int64_t{512} << 20;  // read per bandwidth pass
  int bandwidth_passes = 12;
  int peak_runs = 20;  // best of this many runs of each peak
  bool int8 = true;    // measure the 8-bit peak too
  bool bf16 = true;    // and the bf16 one, where the context multiplies F16/BF16 weights in bf16
};

// What a context's hardware allows, measured: the bounds bench and the live view report against.
struct MachineBounds {
  BandwidthProbe bandwidth;  // read bandwidth from memory, bytes/s (best: the bound)
  double peak_f32 = 0;       // f32 multiply-add rate, flop/s
  double peak_int8 = 0;      // 8-bit multiply-add rate, op/s (0: not measured, or no integer kernels)
  double peak_bf16 = 0;      // bf16 multiply-add rate, flop/s (0: not measured, or no bf16 path)
};

// Where each token of a batch sits in the paged KV cache, for write_kv and attention.
struct KvBatchLayout {
  std::span<const int64_t> rows;                     // [n] physical cache row (block * block_size + slot)
  std::span<const int64_t> n_ctx;                    // [n] positions the token attends: its position + 1
  std::span<const std::span<const BlockId>> tables;  // [n] the block table of the token's sequence
};

class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;

  // "cpu avx2, 2 threads, q8 activations": for logs and benchmark headers.
  virtual std::string describe() const = 0;
  // Parallel workers the context computes with (1 for a single stream).
  virtual int n_threads() const = 0;
  // The instruction set its kernels are written for ("avx2", "avx512"; a device's architecture).
  virtual std::string instruction_set() const { return "unknown"; }
  // Measures what the hardware under the context allows, with as many workers as it computes
  // with, apart from its own (so its compute threads stay as they are). Zeros where a context
  // cannot measure.
  virtual MachineBounds measure_bounds(const BoundsProbe& probe) const { return {}; }
  // How the context spread its work since the last reset (the CPU: its thread pool's meetings);
  // zeros where it keeps no count.
  virtual PoolStats work_stats() const { return {}; }
  virtual void reset_work_stats() {}

  // Memory for activations, scratch and KV storage, `bytes` long (uninitialized), where this
  // context keeps it: host heap for the CPU, protected pages for the guarded context, device memory
  // for a GPU. Only the context's operations read or write it (util/buffer.h).
  virtual Buffer allocate(size_t bytes) { return host_buffer(bytes); }
  // The explicit crossings of the seam: dst = src, element by element. copy_to_host reads a view
  // of this context's memory (src) into host memory (dst); copy_from_host writes host memory (src)
  // into a view of this context's memory (dst). Logits out, hidden states between pipeline stages
  // and for proposers, tensor- and expert-parallel exchanges go through them; nothing else moves
  // activations between the host and the context. src and dst: the same length.
  virtual void copy_to_host(std::span<const float> src, std::span<float> dst) = 0;
  virtual void copy_from_host(std::span<const float> src, std::span<float> dst) = 0;

  // The type this context's kernels read matrices of `stored` type in. A model converts its
  // matrices to it once at load (Model::in_kernel_type); the CPU with AVX512-BF16 under Q8
  // activations reads F16 as BF16 (the kernels convert F16 as they read otherwise: same bits,
  // slower). Default: as stored.
  virtual TensorType matmul_weight_type(TensorType stored) const { return stored; }
  // Whether this context's kernels read 2-D matrices of `stored` type packed (kernels/bf16_pack.h:
  // the CPU's bf16 path). A model packs them once at load (Model::in_kernel_type) beside the
  // matrix as stored, which every other reader of the matrix keeps using. Default: no.
  virtual bool packs_bf16_groups(TensorType /*stored*/) const { return false; }

  // x[t] = row tokens[t] of `table` (dequantized). table: {dim, n_vocab}; x: [n][dim]
  virtual void embed(const TensorView& table, std::span<const TokenId> tokens, std::span<float> x) = 0;
  // y[t] = W x[t]. w: GGUF shape {n_in, n_out}; x: [n][n_in]; y: [n][n_out]. Each output is
  // reduced in an order that depends only on the row, never on n or on how work is split.
  virtual void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n) = 0;
  // y_i = W_i x[t] for up to four weights with the same input (a layer's Q, K and V; gate and
  // up), each y_i the bits matmul gives it. One operation, so a backend can run the products as
  // one job: the CPU meets its threads once and rounds x to Q8 once. x: [n][n_in]
  virtual void matmuls(std::span<const MatmulOutput> outs, std::span<const float> x, int64_t n) {
    for (const MatmulOutput& o : outs) matmul(*o.w, x, o.y, n);
  }
  // gate = glu(W_gate x[t]) * (W_up x[t]) and up = W_up x[t]: a gated feed-forward's products and
  // its activation as one operation, the bits of matmuls({gate, up}) followed by swiglu / geglu.
  // One operation so a backend can apply the activation to each block of rows as soon as both
  // products of it are done (the CPU: on every thread, inside the products' one meeting of the
  // threads). w_gate, w_up: GGUF shape {n_in, ffn}; x: [n][n_in]; gate, up: [n][ffn]
  virtual void matmul_glu(const TensorView& w_gate, const TensorView& w_up, Glu glu, std::span<const float> x,
                          std::span<float> gate, std::span<float> up, int64_t n) {
    const MatmulOutput gate_up[] = {{&w_gate, gate}, {&w_up, up}};
    matmuls(gate_up, x, n);
    if (glu == Glu::Gelu) {
      geglu(gate, up);
    } else {
      swiglu(gate, up);
    }
  }
  // out[t] = x[t] / rms(x[t]) * weight. x, out: [n][dim] (out may alias x); weight: [dim]
  virtual void rmsnorm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out,
                       int64_t n) = 0;
  // x[t] += bias. x: [n][width]; bias: [width]
  virtual void add_bias(std::span<float> x, std::span<const float> bias, int64_t n) = 0;
  // x += y, element by element (the residual stream). x, y: [n * width]
  virtual void add(std::span<float> x, std::span<const float> y) = 0;
  // gate = silu(gate) * up. gate, up: [n * ffn]
  virtual void swiglu(std::span<float> gate, std::span<const float> up) = 0;
  // x = silu(x) = x / (1 + e^-x), the bits swiglu gives with up = 1 (the draft heads' activation).
  // x: [n * width]
  virtual void silu(std::span<float> x) = 0;
  // gate = gelu(gate) * up, gelu in its tanh form (Gemma's GeGLU). gate, up: [n * ffn]
  virtual void geglu(std::span<float> gate, std::span<const float> up) = 0;
  // x *= s (Gemma's embedding scale). x: [n * width]
  virtual void scale(std::span<float> x, float s) = 0;
  // x = cap * tanh(x / cap), element by element (Gemma 2's final logit soft-capping). x: [n * width]
  virtual void softcap(std::span<float> x, float cap) = 0;
  // cos_sin[t] = the RoPE angles of positions[t]. cos_sin: [n][rope_dim / 2][2]
  virtual void rope_angles(std::span<const int32_t> positions, const RopeParams& p, std::span<float> cos_sin) = 0;
  // Rotates every head of every token by its angles. x: [n][n_heads][head_dim]; cos_sin as above
  virtual void rope(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p,
                    std::span<const float> cos_sin, int64_t n) = 0;
  // --- The KV cache's storage (kv/kv_storage.h): created here, read and written only by the
  // operations below; the host keeps the block pool (kv/block_pool.h) that indexes it.
  // Storage for `spec`, in memory this context allocates. Default: host storage
  // (kv/host_kv_storage.h) in allocate()d memory, so a context that only changes where memory
  // lives overrides allocate alone.
  virtual std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec);
  // Stores each token's K and V ([n][n_kv_heads][head_dim]) at its cache row of `layer`.
  virtual void write_kv(KvStorage& kv, int64_t layer, const KvBatchLayout& layout, std::span<const float> k,
                        std::span<const float> v) = 0;
  // Causal attention of every token over its sequence's cached K/V in `layer` (this batch's K/V
  // already written), scores scaled, capped and windowed as `params` says (kernels/attention.h).
  // q, out: [n][n_heads][head_dim]; query head h reads KV head h / (n_heads / kv.n_kv_heads()).
  // Results do not depend on the batch or the thread count.
  virtual void attention(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                         const AttentionParams& params, std::span<const float> q, std::span<float> out) = 0;
  // Each copy's block `from` into block `to`, every layer, in order (the pool's copy-on-write:
  // BlockPool::pending_copies). The defaults below work on host storage.
  virtual void copy_kv_blocks(KvStorage& kv, std::span<const BlockCopy> copies);
  // The K/V of KV heads [h0, h1) of `block`, every layer, as kv.heads_bytes(h0, h1) bytes
  // ([layer][K values, V values, quantized: K scales, V scales]): what dist/ moves between
  // processes. import_kv writes such bytes into a block of storage of the same type and block
  // size (its head count may differ).
  virtual void export_kv(const KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out);
  virtual void import_kv(KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in);
  // One token's K and V at physical row `row` of `layer`, as f32 ([n_kv_heads][head_dim] each):
  // for tests and tools.
  virtual void read_kv_row(const KvStorage& kv, int64_t layer, int64_t row, std::span<float> k, std::span<float> v);

  // Mixture of experts. The model routes each token (route_experts), groups the tokens by expert
  // on the host (so each expert's weights are read once per step, for all its tokens), gathers
  // their rows, runs the experts (matmul_experts) and sums each token's expert outputs back
  // (combine_rows). backend/moe_routing.h states the routing rule.

  // Each token's k experts (ascending) and their weights from its router logits: host metadata
  // (the grouping runs on the host), so a device context copies them back.
  // logits: [n][E] (context memory); experts, weights: [n][k] (host memory)
  virtual void route_experts(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                             std::span<float> weights) = 0;
  // out[i] = x[rows[i]]. x: [n][width]; rows: [m]; out: [m][width]
  virtual void gather_rows(std::span<const float> x, std::span<const int32_t> rows, std::span<float> out,
                           int64_t width) = 0;
  // For each expert e, rows [offsets[e], offsets[e + 1]) of y = W_e times the same rows of x.
  // w: GGUF shape {n_in, n_out, E} (E matrices stacked); offsets: [E + 1], nondecreasing from 0
  // to m; x: [m][n_in]; y: [m][n_out]. Each row gets the bits matmul(W_e) gives it alone.
  virtual void matmul_experts(const TensorView& w, std::span<const int64_t> offsets, std::span<const float> x,
                              std::span<float> y) = 0;
  // out[t] = the sum, over i ascending with rows[i] == t, of scales[i] * y[i]; 0 where no row is t.
  // y: [m][width]; rows, scales: [m]; out: [n][width]
  virtual void combine_rows(std::span<const float> y, std::span<const int32_t> rows, std::span<const float> scales,
                            std::span<float> out, int64_t width) = 0;
  // x[t] *= sigmoid(gate[t]) (Qwen2-MoE's shared-expert gate). x: [n][width]; gate: [n]
  virtual void sigmoid_gate(std::span<float> x, std::span<const float> gate, int64_t n) = 0;
};

// Brings `kv`'s storage up to date with its pool: applies the copies copy-on-write left pending
// (BlockPool::pending_copies) and clears them. Call before anything reads or writes the storage
// (the model's forward, dist/'s transfers do).
inline void apply_block_copies(ExecutionContext& ctx, KvCache& kv) {
  if (kv.pool().pending_copies().empty()) return;
  ctx.copy_kv_blocks(kv.storage(), kv.pool().pending_copies());
  kv.pool().clear_pending_copies();
}

// The first `floats` floats of `b`, which `ctx` reallocates (contents lost) when `b` is shorter:
// scratch grown on demand, geometrically as a vector grows (a batch a little larger than the last
// does not reallocate).
inline std::span<float> grow_buffer(ExecutionContext& ctx, Buffer& b, size_t floats) {
  const size_t bytes = floats * sizeof(float);
  if (b.bytes() < bytes) b = ctx.allocate(std::max(bytes, 2 * b.bytes()));
  return b.as<float>().first(floats);
}

}  // namespace peregrine
