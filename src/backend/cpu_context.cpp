#include "backend/cpu_context.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "backend/host_kv.h"
#include "kernels/attention.h"
#include "kernels/kernel_table.h"
#include "kernels/machine_probe.h"
#include "util/error.h"

namespace peregrine {
namespace {

// Below this many multiply-adds (scores and weighted values) attention runs on the calling thread.
constexpr int64_t kMinParallelAttentionMacs = 1 << 16;

template <class T>
void grow(std::vector<T>& v, int64_t size) {
  if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
}

template <class T>
std::span<T> row_of(std::span<T> m, int64_t t, int64_t width) {
  return m.subspan(static_cast<size_t>(t * width), static_cast<size_t>(width));
}

}  // namespace

CpuContext::CpuContext(int n_threads, Activations act, std::optional<Isa> isa)
    : isa_(isa.value_or(active_isa())), act_(act) {
  if (n_threads < 1 || n_threads > 1024) {
    throw UsageError("thread count " + std::to_string(n_threads) + " is outside [1, 1024]");
  }
  if (!isa_supported(isa_)) throw UsageError("this CPU cannot run the " + std::string(isa_name(isa_)) + " kernels");
  pool_ = std::make_unique<ThreadPool>(n_threads);
}

std::string CpuContext::describe() const {
  const bool bf16 = uses_bf16_dot(TensorType::BF16, isa_, act_);
  return "cpu " + std::string(isa_name(isa_)) + ", " + std::to_string(n_threads()) + " threads, " +
         (act_ == Activations::Q8 ? (bf16 ? "q8 activations (bf16 for 16-bit weights)" : "q8 activations")
                                  : "f32 activations");
}

TensorType CpuContext::matmul_weight_type(TensorType stored) const {
  if (const TensorType layout = int8_kernel_type(stored, isa_, act_); layout != stored) return layout;
  return stored == TensorType::F16 && uses_bf16_dot(stored, isa_, act_) ? TensorType::BF16 : stored;
}

bool CpuContext::packs_bf16_groups(TensorType stored) const {
  return uses_bf16_dot(stored, isa_, act_) && kernel_table(isa_).matmul_bf16_groups != nullptr;
}

MachineBounds CpuContext::measure_bounds(const BoundsProbe& probe) const {
  // A pool of its own: the probes pin their threads to CPUs, which the compute pool's must not be.
  ThreadPool pool(n_threads());
  MachineBounds b;
  b.bandwidth = probe_read_bandwidth(pool, probe.bandwidth_bytes, probe.bandwidth_passes);
  b.peak_f32 = measure_peak_flops(pool, isa_, probe.peak_runs);
  if (probe.int8) b.peak_int8 = measure_peak_int8_ops(pool, isa_, probe.peak_runs);
  if (probe.bf16 && uses_bf16_dot(TensorType::BF16, isa_, act_)) {
    b.peak_bf16 = measure_peak_bf16_flops(pool, isa_, probe.peak_runs);
  }
  return b;
}

void CpuContext::embed(const TensorView& table, std::span<const TokenId> tokens, std::span<float> x) {
  const int64_t dim = table.row_length();
  for (size_t t = 0; t < tokens.size(); ++t) table.dequantize_row_to(tokens[t], row_of(x, static_cast<int64_t>(t), dim));
}

void CpuContext::matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n) {
  const MatmulOutput one{&w, y};
  matmuls({&one, 1}, x, n);
}

void CpuContext::matmuls(std::span<const MatmulOutput> outs, std::span<const float> x, int64_t n) {
  if (outs.empty()) return;
  if (outs.size() > kMaxMatmulGroup) {  // more than one job holds: run them in groups
    matmuls(outs.first(kMaxMatmulGroup), x, n);
    return matmuls(outs.subspan(kMaxMatmulGroup), x, n);
  }
  std::array<MatmulTarget, kMaxMatmulGroup> targets;
  for (size_t i = 0; i < outs.size(); ++i) targets[i] = {outs[i].w, outs[i].y};
  const std::span<float> rows = matmul_scratch(outs[0].w->row_length(), n);  // before act_q8_ is read
  matmul_group({targets.data(), outs.size()}, x, n, rows, pool_.get(), isa_, act_, act_q8_);
}

std::span<float> CpuContext::matmul_scratch(int64_t n_in, int64_t n) {
  grow(matmul_rows_, matmul_scratch_floats(n_in, n_threads()));
  grow(act_q8_, act_scratch_blocks(n, n_in));
  return {matmul_rows_.data(), static_cast<size_t>(matmul_scratch_floats(n_in, n_threads()))};
}

void CpuContext::matmul_glu(const TensorView& w_gate, const TensorView& w_up, Glu glu, std::span<const float> x,
                            std::span<float> gate, std::span<float> up, int64_t n) {
  const std::span<float> rows = matmul_scratch(w_gate.row_length(), n);  // before act_q8_ is read
  peregrine::matmul_glu({&w_gate, gate}, {&w_up, up}, glu, x, n, rows, pool_.get(), isa_, act_, act_q8_);
}

void CpuContext::rmsnorm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out,
                         int64_t n) {
  const int64_t dim = static_cast<int64_t>(weight.size());
  for (int64_t t = 0; t < n; ++t) peregrine::rmsnorm(row_of(x, t, dim), weight, eps, row_of(out, t, dim));
}

void CpuContext::add_bias(std::span<float> x, std::span<const float> bias, int64_t n) {
  const int64_t width = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < n; ++t) add_in_place(row_of(x, t, width), bias);
}

void CpuContext::add(std::span<float> x, std::span<const float> y) { add_in_place(x, y); }

void CpuContext::swiglu(std::span<float> gate, std::span<const float> up) {
  if (up.size() != gate.size()) throw std::invalid_argument("swiglu: size mismatch");
  kernel_table(isa_).glu(Glu::Silu, gate.data(), up.data(), gate.data(), static_cast<int64_t>(gate.size()));
}

// silu(x) * 1 through the path's glu, a chunk at a time against a row of ones: the path computes
// each element the same whatever slice of a row it is in (kernel_table.h), and x * 1 is x, so
// these are the bits swiglu(x, ones) gives, without a buffer of ones as long as x.
void CpuContext::silu(std::span<float> x) {
  constexpr int64_t kChunk = 256;
  static const std::array<float, kChunk> ones = [] {
    std::array<float, kChunk> a{};
    a.fill(1.f);
    return a;
  }();
  const KernelTable& k = kernel_table(isa_);
  const auto n = static_cast<int64_t>(x.size());
  for (int64_t i = 0; i < n; i += kChunk) {
    k.glu(Glu::Silu, x.data() + i, ones.data(), x.data() + i, std::min(kChunk, n - i));
  }
}

void CpuContext::copy_to_host(std::span<const float> src, std::span<float> dst) {
  if (src.size() != dst.size()) throw std::invalid_argument("copy_to_host: size mismatch");
  std::copy(src.begin(), src.end(), dst.begin());
}

void CpuContext::copy_from_host(std::span<const float> src, std::span<float> dst) {
  if (src.size() != dst.size()) throw std::invalid_argument("copy_from_host: size mismatch");
  std::copy(src.begin(), src.end(), dst.begin());
}

void CpuContext::geglu(std::span<float> gate, std::span<const float> up) {
  if (up.size() != gate.size()) throw std::invalid_argument("geglu: size mismatch");
  kernel_table(isa_).glu(Glu::Gelu, gate.data(), up.data(), gate.data(), static_cast<int64_t>(gate.size()));
}

void CpuContext::scale(std::span<float> x, float s) { scale_in_place(x, s); }

void CpuContext::softcap(std::span<float> x, float cap) { softcap_in_place(x, cap); }

void CpuContext::rope_angles(std::span<const int32_t> positions, const RopeParams& p, std::span<float> cos_sin) {
  for (size_t t = 0; t < positions.size(); ++t) {
    peregrine::rope_angles(positions[t], p, row_of(cos_sin, static_cast<int64_t>(t), p.rope_dim));
  }
}

void CpuContext::rope(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p,
                      std::span<const float> cos_sin, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    rope_apply(row_of(x, t, n_heads * head_dim), n_heads, head_dim, p, row_of(cos_sin, t, p.rope_dim));
  }
}

void CpuContext::write_kv(KvStorage& kv, int64_t layer, const KvBatchLayout& layout, std::span<const float> k,
                          std::span<const float> v) {
  HostKvStorage& host = host_kv(kv);
  const int64_t width = kv.n_kv_heads() * kv.head_dim();
  for (size_t t = 0; t < layout.rows.size(); ++t) {
    const auto i = static_cast<int64_t>(t);
    host.write_row(layer, layout.rows[t], row_of(k, i, width), row_of(v, i, width));
  }
}

// Consecutive tokens of one sequence (a verification pass's K + 1 rows, a prompt chunk) attend as
// runs of up to kAttentionRun tokens that share each K/V tile (attention_tokens: converted once,
// scored for all the run's query rows in one call), a task per (run, KV head). Each token gets the
// bits of attention() alone. Returns false, doing nothing, where that does not apply: a sliding
// window, runs of single tokens (decode), or a long context split into segments with too few
// tasks for the threads (Flash-Decoding's split below keeps them busy instead).
bool CpuContext::attention_runs(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                                const AttentionParams& params, std::span<const float> q, std::span<float> out,
                                int64_t n_seg) {
  constexpr int64_t kAttentionRun = 8;
  const auto n = static_cast<int64_t>(layout.rows.size());
  const int64_t hd = kv.head_dim(), kvh = kv.n_kv_heads(), qd = n_heads * hd;
  if (params.window != 0 || n < 2) return false;
  const auto same_table = [&](int64_t a, int64_t b) {
    const auto& ta = layout.tables[static_cast<size_t>(a)];
    const auto& tb = layout.tables[static_cast<size_t>(b)];
    return ta.data() == tb.data() && ta.size() == tb.size();
  };
  std::vector<int64_t>& starts = att_runs_;  // run r covers tokens [starts[r], starts[r + 1])
  starts.clear();
  int64_t positions = 0;  // attended by the whole batch
  for (int64_t t = 0; t < n; ++t) {
    if (starts.empty() || t - starts.back() == kAttentionRun || !same_table(starts.back(), t)) starts.push_back(t);
    positions += layout.n_ctx[static_cast<size_t>(t)];
  }
  const auto n_runs = static_cast<int64_t>(starts.size());
  if (n_runs == n || (n_seg > 1 && n_runs * kvh < 2 * n_threads())) return false;
  starts.push_back(n);
  const KvLayerView view = host_kv(kv).layer_view(layer);
  const int64_t scratch_floats = attention_tokens_scratch_floats(kAttentionRun, n_heads / kvh, hd);
  grow(att_tmp_, n_threads() * scratch_floats);
  const auto run_heads = [&](int64_t task, int thread) {
    const int64_t r = task / kvh, g = task % kvh, t0 = starts[static_cast<size_t>(r)];
    const int64_t n_q = starts[static_cast<size_t>(r + 1)] - t0;
    const auto rows = [&](auto span) {
      return span.subspan(static_cast<size_t>(t0 * qd), static_cast<size_t>(n_q * qd));
    };
    attention_tokens(rows(q), n_q, n_heads, view, layout.tables[static_cast<size_t>(t0)],
                     layout.n_ctx.subspan(static_cast<size_t>(t0), static_cast<size_t>(n_q)), params, rows(out),
                     row_of(std::span<float>(att_tmp_), thread, scratch_floats), g, isa_);
  };
  // A short context is less work than waking the other threads (the demo model's verification).
  if (positions * n_heads * hd * 2 < kMinParallelAttentionMacs) {
    for (int64_t task = 0; task < n_runs * kvh; ++task) run_heads(task, 0);
  } else {
    pool_->parallel_for(n_runs * kvh, run_heads);
  }
  return true;
}

// Tasks are (token, KV head) pairs; when there are too few of them to keep every thread busy on a
// long context, each pair's keys are split into segments as well (Flash-Decoding) and merged in
// segment order afterwards. Both give the same bits (kernels/attention.h). A sliding window skips
// the segments before it: a token's segments are [first_seg(t), seg_end(t)).
void CpuContext::attention(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                           const AttentionParams& params, std::span<const float> q, std::span<float> out) {
  const auto n = static_cast<int64_t>(layout.rows.size());
  if (n == 0) return;
  const int64_t hd = kv.head_dim(), kvh = kv.n_kv_heads(), qd = n_heads * hd;
  const KvLayerView view = host_kv(kv).layer_view(layer);
  const int64_t att_scratch = attention_scratch_floats(n_heads, hd);
  grow(att_tmp_, n_threads() * att_scratch);
  auto thread_scratch = [&](int thread) { return row_of(std::span<float>(att_tmp_), thread, att_scratch); };
  auto n_ctx = [&](int64_t t) { return layout.n_ctx[static_cast<size_t>(t)]; };
  auto table = [&](int64_t t) { return layout.tables[static_cast<size_t>(t)]; };
  auto first_seg = [&](int64_t t) { return attention_first_segment(n_ctx(t), params.window); };
  auto seg_end = [&](int64_t t) { return attention_segments(n_ctx(t)); };
  int64_t n_seg = 1;  // the most segments one token reads
  int64_t positions = 0;  // attended by the whole batch (an upper bound under a window)
  for (int64_t t = 0; t < n; ++t) {
    n_seg = std::max(n_seg, seg_end(t) - first_seg(t));
    positions += n_ctx(t);
  }
  if (attention_runs(kv, layer, layout, n_heads, params, q, out, n_seg)) return;
  if (n * kvh >= 2 * n_threads() || n_seg == 1) {
    const auto heads = [&](int64_t task, int thread) {
      const int64_t t = task / kvh, g = task % kvh;
      peregrine::attention(row_of(q, t, qd), n_heads, view, table(t), n_ctx(t), params, row_of(out, t, qd),
                           thread_scratch(thread), g, g + 1, isa_);
    };
    // A short context is less work than waking the other threads (the demo model's decode).
    if (positions * n_heads * hd * 2 < kMinParallelAttentionMacs) {
      for (int64_t task = 0; task < n * kvh; ++task) heads(task, 0);
    } else {
      pool_->parallel_for(n * kvh, heads);
    }
    return;
  }
  const int64_t part = attention_partial_floats(n_heads / kvh, hd);
  grow(att_part_, n * kvh * n_seg * part);
  auto partials = [&](int64_t t, int64_t g) { return row_of(std::span<float>(att_part_), t * kvh + g, n_seg * part); };
  pool_->parallel_for(n * kvh * n_seg, [&](int64_t task, int thread) {
    const int64_t t = task / (kvh * n_seg), g = task / n_seg % kvh, i = task % n_seg;
    const int64_t seg = first_seg(t) + i;
    if (seg >= seg_end(t)) return;
    attention_segment(row_of(q, t, qd), n_heads, view, table(t), n_ctx(t), params, g, seg,
                      row_of(partials(t, g), i, part), thread_scratch(thread), isa_);
  });
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < kvh; ++g) {
      attention_merge(partials(t, g), seg_end(t) - first_seg(t), n_heads, hd, kvh, g, row_of(out, t, qd));
    }
  }
}

std::shared_ptr<CpuContext> shared_cpu_context() {
  static const std::shared_ptr<CpuContext> context = std::make_shared<CpuContext>(physical_core_count());
  return context;
}

}  // namespace peregrine
