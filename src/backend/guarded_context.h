#pragma once
// The context that proves the seam (issue 28 item 2): it computes with the scalar kernels (an
// inner CpuContext on the scalar path) on memory the host cannot touch outside the context's own
// calls. allocate() hands out page-aligned chunks of one reserved range kept PROT_NONE; every
// operation makes all of them readable and writable, forwards to the inner context, and protects
// them again (also when the operation throws). A model or engine path that reads an activation, a logits row or a KV
// block on the host instead of asking the context (an operation or copy_to_host) dies with
// SIGSEGV at the read, in any test run on this context.
//
// This is the test a CUDA (or any device) context must also pass: whatever runs here keeps to the
// seam, so it runs where the memory is on a device. Slow (two mprotect calls per operation, scalar
// kernels): for tests, `--backend guarded` in the commands.
#include <memory>
#include <string>

#include "backend/cpu_context.h"
#include "backend/execution_context.h"

namespace peregrine {

class GuardedContext final : public ExecutionContext {
 public:
  // n_threads in [1, 1024] (else UsageError).
  explicit GuardedContext(int n_threads = 1, Activations act = Activations::Q8);
  ~GuardedContext() override;

  // Page-aligned, zero-filled, PROT_NONE outside this context's calls. Throws std::bad_alloc.
  Buffer allocate(size_t bytes) override;
  // Buffers handed out and not yet given back (for tests).
  size_t live_regions() const;

  std::string describe() const override;
  int n_threads() const override { return inner_->n_threads(); }
  std::string instruction_set() const override { return inner_->instruction_set(); }
  MachineBounds measure_bounds(const BoundsProbe& probe) const override { return inner_->measure_bounds(probe); }
  PoolStats work_stats() const override { return inner_->work_stats(); }
  void reset_work_stats() override { inner_->reset_work_stats(); }
  TensorType matmul_weight_type(TensorType stored) const override { return inner_->matmul_weight_type(stored); }
  bool packs_bf16_groups(TensorType stored) const override { return inner_->packs_bf16_groups(stored); }

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
  void rope(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p, std::span<const float> cos_sin,
            int64_t n) override;
  // KV storage in this context's protected memory (host layout, so the inner context's kernels
  // read it while an operation has it open).
  std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) override;
  void write_kv(KvStorage& kv, int64_t layer, const KvBatchLayout& layout, std::span<const float> k,
                std::span<const float> v) override;
  void attention(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                 const AttentionParams& params, std::span<const float> q, std::span<float> out) override;
  void copy_kv_blocks(KvStorage& kv, std::span<const BlockCopy> copies) override;
  void export_kv(const KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) override;
  void import_kv(KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in) override;
  void read_kv_row(const KvStorage& kv, int64_t layer, int64_t row, std::span<float> k, std::span<float> v) override;
  void route_experts(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                     std::span<float> weights) override;
  void gather_rows(std::span<const float> x, std::span<const int32_t> rows, std::span<float> out,
                   int64_t width) override;
  void matmul_experts(const TensorView& w, std::span<const int64_t> offsets, std::span<const float> x,
                      std::span<float> y) override;
  void combine_rows(std::span<const float> y, std::span<const int32_t> rows, std::span<const float> scales,
                    std::span<float> out, int64_t width) override;
  void sigmoid_gate(std::span<float> x, std::span<const float> gate, int64_t n) override;

  // The protected memory and its bookkeeping; shared with the Buffers' release, so a buffer may outlive
  // the context that made it.
  class Pages;

 private:
  // Runs f with every buffer open.
  template <class F>
  decltype(auto) open(F&& f);

  std::shared_ptr<Pages> pages_;
  std::unique_ptr<CpuContext> inner_;
};

}  // namespace peregrine
