#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "format/tensor_type.h"
#include "kernels/kernel_table.h"
#include "kv/kv_q8.h"

namespace peregrine {
namespace {

// Converts one cached K or V row to f32 (in place for F32 caches). dst: [n]
// q8, q8_scale: the Q8_0 arrays (the row's scales start at q8_scale + off / 32).
const float* load_row(const KernelTable& k, KvType type, const float* f32, const uint16_t* u16, const int8_t* q8,
                      const uint16_t* q8_scale, size_t off, int64_t n, float* dst) {
  switch (type) {
    case KvType::F32:
      return f32 + off;
    case KvType::F16:
      k.dequantize_row(TensorType::F16, u16 + off, dst, n);
      return dst;
    case KvType::BF16:
      k.dequantize_row(TensorType::BF16, u16 + off, dst, n);
      return dst;
    case KvType::Q8_0:
      k.dequantize_kv_q8_row(q8 + off, q8_scale + off / kKvQ8Block, dst, n);
      return dst;
  }
  return dst;
}

void check(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
           int64_t n_ctx, const AttentionParams& p, std::span<float> scratch, Isa isa) {
  const int64_t hd = kv.head_dim;
  if (p.window < 0 || !(p.softcap >= 0.f) || kv.n_kv_heads < 1 || n_heads % kv.n_kv_heads != 0 ||
      static_cast<int64_t>(q.size()) != n_heads * hd || n_ctx < 1 ||
      static_cast<int64_t>(table.size()) * kv.block_size < n_ctx ||
      static_cast<int64_t>(scratch.size()) < attention_scratch_floats(n_heads, hd) || !isa_supported(isa)) {
    throw std::invalid_argument("attention: sizes do not match");
  }
}

// One segment's partials for m rows of one sequence: row i's `group` query heads of KV head g
// (q_rows: [m][group][hd], contiguous) over positions [p_begin, p_end[i]); a row with
// p_end[i] <= p_begin is left untouched. partials: [m][group][hd + 2] = (unnormalized output,
// running max, running sum). Each tile's K/V rows are converted once for every row, and all rows'
// heads are scored together; each row then takes only its own keys, in the tiles a call for it
// alone would use (tiles start at p_begin), and tile_scores' order per output does not depend on
// how many queries share a call: so every row gets the bits a call for that row alone gives.
void segment_partial(const float* q_rows, int64_t m, int64_t group, const KvLayerView& kv,
                     std::span<const BlockId> table, int64_t p_begin, const int64_t* p_end,
                     const AttentionParams& params, int64_t g, float* partials, float* scratch, Isa isa) {
  const int64_t hd = kv.head_dim;
  const KernelTable& k = kernel_table(isa);
  float* k_tile = scratch;                       // [tile][hd]
  float* v_tile = k_tile + kAttentionTile * hd;  // [tile][hd]
  float* scores = v_tile + kAttentionTile * hd;  // [m][group][tile]
  const float* v_rows[kAttentionTile];
  const int64_t p_last = *std::max_element(p_end, p_end + m);
  for (int64_t i = 0; i < m; ++i) {
    if (p_end[i] <= p_begin) continue;
    for (int64_t j = 0; j < group; ++j) {
      float* pj = partials + (i * group + j) * (hd + 2);
      std::fill(pj, pj + hd, 0.f);
      pj[hd] = -std::numeric_limits<float>::infinity();
      pj[hd + 1] = 0.f;
    }
  }
  for (int64_t t0 = p_begin; t0 < p_last; t0 += kAttentionTile) {
    const int64_t nt = std::min(kAttentionTile, p_last - t0);
    // The tile's K/V rows of this KV head, converted once for all the query heads. K rows
    // are copied when read in place (F32) so the tile's rows are evenly spaced for tile_scores.
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t p = t0 + i;
      const BlockId block = table[static_cast<size_t>(p / kv.block_size)];
      const size_t off = kv.offset(block, p % kv.block_size, g);
      float* k_dst = k_tile + i * hd;
      const float* k_row = load_row(k, kv.type, kv.k_f32, kv.k_u16, kv.k_q8, kv.k_q8_scale, off, hd, k_dst);
      if (k_row != k_dst) std::copy(k_row, k_row + hd, k_dst);
      v_rows[i] = load_row(k, kv.type, kv.v_f32, kv.v_u16, kv.v_q8, kv.v_q8_scale, off, hd, v_tile + i * hd);
    }
    // All the rows' scores for the tile at once (a small GEMM on vector paths).
    k.tile_scores(k_tile, nt, q_rows, m * group, hd, scores, kAttentionTile);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t nr = std::min(kAttentionTile, p_end[r] - t0);  // this row's keys in the tile
      if (nr <= 0) continue;
      for (int64_t j = 0; j < group; ++j) {
        float* sj = scores + (r * group + j) * kAttentionTile;
        float* pj = partials + (r * group + j) * (hd + 2);
        float tile_max = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < nr; ++i) {
          sj[i] *= params.scale;
          if (params.softcap > 0.f) sj[i] = params.softcap * std::tanh(sj[i] / params.softcap);
          tile_max = std::max(tile_max, sj[i]);
        }
        float& run_max = pj[hd];
        float& run_sum = pj[hd + 1];
        if (tile_max > run_max) {
          // A larger maximum: rescale what was accumulated against the old one (once per tile).
          const float correction = std::exp(run_max - tile_max);
          run_sum *= correction;
          k.scale(correction, pj, hd);
          run_max = tile_max;
        }
        run_sum += k.exp_shifted(sj, run_max, nr);
        k.accumulate_rows(sj, v_rows, nr, pj, hd);
      }
    }
  }
}

// a = merge(a, b) for one head's partials ([hd + 2] each).
void merge_into(float* a, const float* b, int64_t hd) {
  const float ma = a[hd], mb = b[hd];
  const float m = std::max(ma, mb);
  const float ca = std::exp(ma - m), cb = std::exp(mb - m);
  for (int64_t i = 0; i < hd; ++i) a[i] = a[i] * ca + b[i] * cb;
  a[hd] = m;
  a[hd + 1] = a[hd + 1] * ca + b[hd + 1] * cb;
}

}  // namespace

void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, const AttentionParams& p, std::span<float> out, std::span<float> scratch) {
  attention(q, n_heads, kv, table, n_ctx, p, out, scratch, 0, kv.n_kv_heads, active_isa());
}

void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, const AttentionParams& p, std::span<float> out, std::span<float> scratch,
               int64_t kv_head_begin, int64_t kv_head_end, Isa isa) {
  check(q, n_heads, kv, table, n_ctx, p, scratch, isa);
  const int64_t hd = kv.head_dim;
  if (static_cast<int64_t>(out.size()) != n_heads * hd || kv_head_begin < 0 || kv_head_end > kv.n_kv_heads ||
      kv_head_begin > kv_head_end) {
    throw std::invalid_argument("attention: sizes do not match");
  }
  const int64_t group = n_heads / kv.n_kv_heads;
  const int64_t part = attention_partial_floats(group, hd);
  float* tile_scratch = scratch.data();
  float* merged = tile_scratch + 2 * kAttentionTile * hd + n_heads * kAttentionTile;  // [part]
  float* seg = merged + part;                                                         // [part]
  for (int64_t g = kv_head_begin; g < kv_head_end; ++g) {
    const float* q_g = q.data() + g * group * hd;
    // Segments one after another, merged in order: the same bits as Flash-Decoding's split.
    const int64_t first = attention_first_position(n_ctx, p.window), s0 = first / kAttentionSegment;
    for (int64_t s = s0; s < attention_segments(n_ctx); ++s) {
      const int64_t p0 = std::max(first, s * kAttentionSegment), p1 = std::min(n_ctx, (s + 1) * kAttentionSegment);
      segment_partial(q_g, 1, group, kv, table, p0, &p1, p, g, s == s0 ? merged : seg, tile_scratch, isa);
      if (s > s0) {
        for (int64_t j = 0; j < group; ++j) merge_into(merged + j * (hd + 2), seg + j * (hd + 2), hd);
      }
    }
    for (int64_t j = 0; j < group; ++j) {
      const float* pj = merged + j * (hd + 2);
      const float inv = 1.0f / pj[hd + 1];
      float* o = out.data() + (g * group + j) * hd;
      for (int64_t i = 0; i < hd; ++i) o[i] = pj[i] * inv;
    }
  }
}

void attention_rows(std::span<const float> q, int64_t m, int64_t n_heads, const KvLayerView& kv,
                    std::span<const BlockId> table, int64_t n_ctx0, const AttentionParams& p, std::span<float> out,
                    std::span<float> scratch, int64_t kv_head_begin, int64_t kv_head_end, Isa isa) {
  const int64_t hd = kv.head_dim, qd = n_heads * hd;
  if (m < 1 || m > kAttentionMaxRows || static_cast<int64_t>(q.size()) != m * qd ||
      static_cast<int64_t>(out.size()) != m * qd || n_ctx0 < 1 ||
      static_cast<int64_t>(scratch.size()) < attention_rows_scratch_floats(n_heads, hd, m)) {
    throw std::invalid_argument("attention_rows: sizes do not match");
  }
  const auto row = [&](auto span, int64_t i) {
    return span.subspan(static_cast<size_t>(i * qd), static_cast<size_t>(qd));
  };
  if (m == 1 || p.window > 0) {  // under a window each row's keys start elsewhere: one call per row
    for (int64_t i = 0; i < m; ++i) {
      attention(row(q, i), n_heads, kv, table, n_ctx0 + i, p, row(out, i), scratch, kv_head_begin, kv_head_end, isa);
    }
    return;
  }
  const int64_t n_last = n_ctx0 + m - 1;
  check(row(q, 0), n_heads, kv, table, n_last, p, scratch, isa);
  if (kv_head_begin < 0 || kv_head_end > kv.n_kv_heads || kv_head_begin > kv_head_end) {
    throw std::invalid_argument("attention_rows: sizes do not match");
  }
  const int64_t group = n_heads / kv.n_kv_heads, part = attention_partial_floats(group, hd);
  float* tile_scratch = scratch.data();
  float* q_rows = tile_scratch + 2 * kAttentionTile * hd + m * group * kAttentionTile;  // [m][group][hd]
  float* merged = q_rows + m * group * hd;                                              // [m][part]
  float* seg = merged + m * part;                                                       // [m][part]
  int64_t p_end[kAttentionMaxRows];
  for (int64_t g = kv_head_begin; g < kv_head_end; ++g) {
    for (int64_t i = 0; i < m; ++i) {
      const float* q_g = q.data() + i * qd + g * group * hd;
      std::copy(q_g, q_g + group * hd, q_rows + i * group * hd);
    }
    // Segments one after another, each row merging those it reaches, in order.
    for (int64_t s = 0; s < attention_segments(n_last); ++s) {
      const int64_t p0 = s * kAttentionSegment;
      for (int64_t i = 0; i < m; ++i) p_end[i] = std::min(n_ctx0 + i, (s + 1) * kAttentionSegment);
      segment_partial(q_rows, m, group, kv, table, p0, p_end, p, g, s == 0 ? merged : seg, tile_scratch, isa);
      if (s == 0) continue;
      for (int64_t i = 0; i < m; ++i) {
        if (p_end[i] <= p0) continue;
        for (int64_t j = 0; j < group; ++j)
          merge_into(merged + i * part + j * (hd + 2), seg + i * part + j * (hd + 2), hd);
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < group; ++j) {
        const float* pj = merged + i * part + j * (hd + 2);
        const float inv = 1.0f / pj[hd + 1];
        float* o = out.data() + i * qd + (g * group + j) * hd;
        for (int64_t e = 0; e < hd; ++e) o[e] = pj[e] * inv;
      }
    }
  }
}

void attention_segment(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
                       int64_t n_ctx, const AttentionParams& p, int64_t kv_head, int64_t segment,
                       std::span<float> partial, std::span<float> scratch, Isa isa) {
  check(q, n_heads, kv, table, n_ctx, p, scratch, isa);
  const int64_t hd = kv.head_dim, group = n_heads / kv.n_kv_heads;
  const int64_t first = attention_first_position(n_ctx, p.window);
  if (kv_head < 0 || kv_head >= kv.n_kv_heads || segment < first / kAttentionSegment ||
      segment >= attention_segments(n_ctx) ||
      static_cast<int64_t>(partial.size()) < attention_partial_floats(group, hd)) {
    throw std::invalid_argument("attention_segment: sizes do not match");
  }
  const int64_t p0 = std::max(first, segment * kAttentionSegment),
                p1 = std::min(n_ctx, (segment + 1) * kAttentionSegment);
  segment_partial(q.data() + kv_head * group * hd, 1, group, kv, table, p0, &p1, p, kv_head, partial.data(),
                  scratch.data(), isa);
}

void attention_merge(std::span<float> partials, int64_t n_segments, int64_t n_heads, int64_t head_dim,
                     int64_t n_kv_heads, int64_t kv_head, std::span<float> out) {
  const int64_t group = n_heads / n_kv_heads, hd = head_dim, part = attention_partial_floats(group, hd);
  if (n_segments < 1 || static_cast<int64_t>(partials.size()) < n_segments * part ||
      static_cast<int64_t>(out.size()) != n_heads * hd || kv_head < 0 || kv_head >= n_kv_heads) {
    throw std::invalid_argument("attention_merge: sizes do not match");
  }
  float* merged = partials.data();
  for (int64_t s = 1; s < n_segments; ++s) {
    for (int64_t j = 0; j < group; ++j) merge_into(merged + j * (hd + 2), merged + s * part + j * (hd + 2), hd);
  }
  for (int64_t j = 0; j < group; ++j) {
    const float* pj = merged + j * (hd + 2);
    const float inv = 1.0f / pj[hd + 1];
    float* o = out.data() + (kv_head * group + j) * hd;
    for (int64_t i = 0; i < hd; ++i) o[i] = pj[i] * inv;
  }
}

}  // namespace peregrine
