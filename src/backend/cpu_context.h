#pragma once
// The CPU execution context: kernels/ on a persistent thread pool, one ISA path, one activation
// mode, and the per-thread scratch every kernel call shares. Create one per process
// (shared_cpu_context) and hand it to every Model.
#include <memory>
#include <optional>
#include <vector>

#include "backend/execution_context.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace peregrine {

class CpuContext final : public ExecutionContext {
 public:
  // n_threads in [1, 1024] (else UsageError); isa must run on this CPU (else UsageError).
  CpuContext(int n_threads, Activations act = Activations::Q8, std::optional<Isa> isa = std::nullopt);

  Isa isa() const { return isa_; }
  Activations activations() const { return act_; }
  ThreadPool& pool() { return *pool_; }

  std::string describe() const override;
  int n_threads() const override { return pool_->size(); }
  std::string instruction_set() const override { return std::string(isa_name(isa_)); }
  MachineBounds measure_bounds(const BoundsProbe& probe) const override;
  PoolStats work_stats() const override { return pool_->stats(); }
  TensorType matmul_weight_type(TensorType stored) const override;
  bool packs_bf16_groups(TensorType stored) const override;
  void reset_work_stats() override { pool_->reset_stats(); }
  // The CPU's memory is the host's: the crossings are copies.
  void copy_to_host(std::span<const float> src, std::span<float> dst) override;
  void copy_from_host(std::span<const float> src, std::span<float> dst) override;
  void embed(const TensorView& table, std::span<const TokenId> tokens, std::span<float> x) override;
  void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n) override;
  void matmuls(std::span<const MatmulOutput> outs, std::span<const float> x, int64_t n) override;
  void matmul_glu(const TensorView& w_gate, const TensorView& w_up, Glu glu, std::span<const float> x,
                  std::span<float> gate, std::span<float> up, int64_t n) override;
  void rmsnorm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out,
               int64_t n) override;
  void add_bias(std::span<float> x, std::span<const float> bias, int64_t n) override;
  void add(std::span<float> x, std::span<const float> y) override;
  void swiglu(std::span<float> gate, std::span<const float> up) override;
  void silu(std::span<float> x) override;
  void geglu(std::span<float> gate, std::span<const float> up) override;
  void scale(std::span<float> x, float s) override;
  void softcap(std::span<float> x, float cap) override;
  void rope_angles(std::span<const int32_t> positions, const RopeParams& p, std::span<float> cos_sin) override;
  void rope(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p,
            std::span<const float> cos_sin, int64_t n) override;
  void write_kv(KvStorage& kv, int64_t layer, const KvBatchLayout& layout, std::span<const float> k,
                std::span<const float> v) override;
  void attention(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                 const AttentionParams& params, std::span<const float> q, std::span<float> out) override;
  // Mixture of experts (cpu_moe.cpp).
  void route_experts(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                     std::span<float> weights) override;
  void gather_rows(std::span<const float> x, std::span<const int32_t> rows, std::span<float> out,
                   int64_t width) override;
  void matmul_experts(const TensorView& w, std::span<const int64_t> offsets, std::span<const float> x,
                      std::span<float> y) override;
  void combine_rows(std::span<const float> y, std::span<const int32_t> rows, std::span<const float> scales,
                    std::span<float> out, int64_t width) override;
  void sigmoid_gate(std::span<float> x, std::span<const float> gate, int64_t n) override;

 private:
  // The row scratch for n_in-long weights; grows act_q8_ for n tokens of them too, so call it
  // before taking a span of act_q8_.
  std::span<float> matmul_scratch(int64_t n_in, int64_t n);
  // Attention by runs of one sequence's consecutive tokens (a verification pass, a prompt chunk;
  // cpu_context.cpp); false, doing nothing, where that does not apply.
  bool attention_runs(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                      const AttentionParams& params, std::span<const float> q, std::span<float> out, int64_t n_seg);

  std::unique_ptr<ThreadPool> pool_;
  Isa isa_;
  Activations act_;
  // Scratch, grown on demand and shared by every model using this context (calls never overlap).
  std::vector<float> matmul_rows_;  // [matmul_scratch_floats(n_in, threads)] dequantized / unpacked rows
  std::vector<Q8Block> act_q8_;     // [n][n_in / 32] quantized matmul inputs
  std::vector<float> att_tmp_;      // [threads][attention_(tokens_)scratch_floats] attention kernel scratch
  std::vector<int64_t> att_runs_;   // [runs + 1] first token of each attention run
  std::vector<float> att_part_;     // [n][n_kv_heads][segments][partial] Flash-Decoding partials
};

// The process's CPU context: physical cores, the best ISA (or PEREGRINE_ISA), Q8 activations;
// created on first use. Models built without a context share it.
std::shared_ptr<CpuContext> shared_cpu_context();

}  // namespace peregrine
