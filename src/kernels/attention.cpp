#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "format/tensor_type.h"
#include "kernels/matmul.h"
#include "kernels/simd_avx2.h"

namespace peregrine {
namespace {

// Returns the f32 row at element offset `off`, converting f16/bf16 rows into `buf` ([head_dim]).
const float* load_row(KvType type, const float* f32, const uint16_t* u16, size_t off, int64_t n, float* buf) {
  switch (type) {
    case KvType::F32:
      return f32 + off;
    case KvType::F16:
      for (int64_t i = 0; i < n; ++i) buf[i] = fp16_to_fp32(u16[off + static_cast<size_t>(i)]);
      return buf;
    case KvType::BF16:
      for (int64_t i = 0; i < n; ++i) buf[i] = bf16_to_fp32(u16[off + static_cast<size_t>(i)]);
      return buf;
  }
  return buf;
}

}  // namespace

void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, float scale, std::span<float> out, std::span<float> scratch) {
  attention(q, n_heads, kv, table, n_ctx, scale, out, scratch, 0, kv.n_kv_heads, active_isa());
}

void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, float scale, std::span<float> out, std::span<float> scratch, int64_t kv_head_begin,
               int64_t kv_head_end, Isa isa) {
  const int64_t hd = kv.head_dim;
  if (kv.n_kv_heads < 1 || n_heads % kv.n_kv_heads != 0 || static_cast<int64_t>(q.size()) != n_heads * hd ||
      static_cast<int64_t>(out.size()) != n_heads * hd || n_ctx < 1 ||
      static_cast<int64_t>(table.size()) * kv.block_size < n_ctx ||
      static_cast<int64_t>(scratch.size()) < attention_scratch_floats(n_heads, hd) || kv_head_begin < 0 ||
      kv_head_end > kv.n_kv_heads || kv_head_begin > kv_head_end || (isa == Isa::Avx2 && !isa_supported(isa))) {
    throw std::invalid_argument("attention: sizes do not match");
  }
  const int64_t group = n_heads / kv.n_kv_heads;
  float* k_buf = scratch.data();           // [head_dim]
  float* v_buf = k_buf + hd;               // [head_dim]
  float* run_max = v_buf + hd;             // [n_heads]
  float* run_sum = run_max + n_heads;      // [n_heads]
  const int64_t h_begin = kv_head_begin * group, h_end = kv_head_end * group;
  const bool avx2 = isa == Isa::Avx2;
  for (int64_t h = h_begin; h < h_end; ++h) {
    run_max[h] = -std::numeric_limits<float>::infinity();
    run_sum[h] = 0.f;
    for (int64_t i = 0; i < hd; ++i) out[static_cast<size_t>(h * hd + i)] = 0.f;
  }

  for (int64_t g = kv_head_begin; g < kv_head_end; ++g) {
    for (int64_t p = 0; p < n_ctx; ++p) {
      const BlockId block = table[static_cast<size_t>(p / kv.block_size)];
      const size_t off = kv.offset(block, p % kv.block_size, g);
      const float* k = load_row(kv.type, kv.k_f32, kv.k_u16, off, hd, k_buf);
      const float* v = load_row(kv.type, kv.v_f32, kv.v_u16, off, hd, v_buf);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float score = dot(q.data() + h * hd, k, hd, isa) * scale;
        float* acc = out.data() + h * hd;
        if (score > run_max[h]) {
          // New maximum: rescale what was accumulated against the old one.
          const float correction = std::exp(run_max[h] - score);
          run_sum[h] *= correction;
          if (avx2) {
            avx2::scale(correction, acc, hd);
          } else {
            for (int64_t i = 0; i < hd; ++i) acc[i] *= correction;
          }
          run_max[h] = score;
        }
        const float w = std::exp(score - run_max[h]);
        run_sum[h] += w;
        if (avx2) {
          avx2::axpy(w, v, acc, hd);
        } else {
          for (int64_t i = 0; i < hd; ++i) acc[i] += w * v[i];
        }
      }
    }
  }
  for (int64_t h = h_begin; h < h_end; ++h) {
    const float inv = 1.0f / run_sum[h];
    float* acc = out.data() + h * hd;
    for (int64_t i = 0; i < hd; ++i) acc[i] *= inv;
  }
}

}  // namespace peregrine
