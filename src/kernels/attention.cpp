#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "format/tensor_type.h"
#include "kernels/kernel_table.h"

namespace peregrine {
namespace {

// Converts one cached K or V row to f32 (in place for F32 caches). dst: [n]
// bytes, scales: a quantized type's arrays (KvLayerView); `off` is the row's element offset.
const float* load_row(const KernelTable& k, const KvLayerView& kv, const float* f32, const uint16_t* u16,
                      const uint8_t* bytes, const uint16_t* scales, size_t off, int64_t n, float* dst) {
  const auto group = static_cast<size_t>(kv.scale_group);
  switch (kv.type) {
    case KvType::F32:
      return f32 + off;
    case KvType::F16:
      k.dequantize_row(TensorType::F16, u16 + off, dst, n);
      return dst;
    case KvType::BF16:
      k.dequantize_row(TensorType::BF16, u16 + off, dst, n);
      return dst;
    case KvType::Q8_0:
      k.dequantize_kv_q8_row(reinterpret_cast<const int8_t*>(bytes + off), scales + off / group, dst, n, static_cast<int64_t>(group));
      return dst;
    case KvType::FP8_E4M3:
      k.dequantize_kv_fp8_row(bytes + off, scales[off / group], dst, n);
      return dst;
    case KvType::Q4_0:
      k.dequantize_kv_q4_row(bytes + off / 2, scales + off / group, dst, n, static_cast<int64_t>(group));
      return dst;
  }
  return dst;
}

// Throws unless one token's query ([n_heads][head_dim]) can attend n_ctx positions of table.
void check_shapes(int64_t q_size, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table, int64_t n_ctx,
                  const AttentionParams& p, Isa isa) {
  if (p.window < 0 || !(p.softcap >= 0.f) || kv.n_kv_heads < 1 || n_heads % kv.n_kv_heads != 0 ||
      q_size != n_heads * kv.head_dim || n_ctx < 1 || static_cast<int64_t>(table.size()) * kv.block_size < n_ctx ||
      !isa_supported(isa)) {
    throw std::invalid_argument("attention: sizes do not match");
  }
}

void check(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
           int64_t n_ctx, const AttentionParams& p, std::span<float> scratch, Isa isa) {
  check_shapes(static_cast<int64_t>(q.size()), n_heads, kv, table, n_ctx, p, isa);
  if (static_cast<int64_t>(scratch.size()) < attention_scratch_floats(n_heads, kv.head_dim)) {
    throw std::invalid_argument("attention: sizes do not match");
  }
}

// Clears a partial ([group][hd + 2]) before its segment's first tile.
void start_partial(float* partial, int64_t group, int64_t hd) {
  for (int64_t j = 0; j < group; ++j) {
    float* pj = partial + j * (hd + 2);
    std::fill(pj, pj + hd, 0.f);
    pj[hd] = -std::numeric_limits<float>::infinity();
    pj[hd + 1] = 0.f;
  }
}

// The tile [t0, t0 + nt) of KV head g: K rows copied or converted into k_tile ([nt][hd], evenly
// spaced for tile_scores), V rows converted into v_tile where needed, v_rows[i] = position t0 + i's V.
void load_tile(const KernelTable& k, const KvLayerView& kv, std::span<const BlockId> table, int64_t t0, int64_t nt,
               int64_t g, float* k_tile, float* v_tile, const float** v_rows) {
  const int64_t hd = kv.head_dim;
  for (int64_t i = 0; i < nt; ++i) {
    const int64_t p = t0 + i;
    const BlockId block = table[static_cast<size_t>(p / kv.block_size)];
    const size_t off = kv.offset(block, p % kv.block_size, g);
    float* k_dst = k_tile + i * hd;
    const float* k_row = load_row(k, kv, kv.k_f32, kv.k_u16, kv.k_bytes, kv.k_scales, off, hd, k_dst);
    if (k_row != k_dst) std::copy(k_row, k_row + hd, k_dst);
    v_rows[i] = load_row(k, kv, kv.v_f32, kv.v_u16, kv.v_bytes, kv.v_scales, off, hd, v_tile + i * hd);
  }
}

// One query head's step over a tile: its raw scores sj[0..nt) become weights against the running
// maximum pj[hd] (raised once per tile, rescaling what was accumulated), the running sum pj[hd + 1]
// grows by them and pj[0..hd) by the weighted V rows.
void softmax_tile(const KernelTable& k, float* sj, int64_t nt, const AttentionParams& params,
                  const float* const* v_rows, float* pj, int64_t hd) {
  float tile_max = -std::numeric_limits<float>::infinity();
  if (params.softcap > 0.f) {
    for (int64_t i = 0; i < nt; ++i) {
      sj[i] = params.softcap * std::tanh(sj[i] * params.scale / params.softcap);
      tile_max = std::max(tile_max, sj[i]);
    }
  } else {
    tile_max = k.scale_max(sj, params.scale, nt);
  }
  float& run_max = pj[hd];
  float& run_sum = pj[hd + 1];
  if (tile_max > run_max) {
    const float correction = std::exp(run_max - tile_max);
    run_sum *= correction;
    k.scale(correction, pj, hd);
    run_max = tile_max;
  }
  run_sum += k.exp_shifted(sj, run_max, nt);
  k.accumulate_rows(sj, v_rows, nt, pj, hd);
}

// One segment's partial for the `group` query heads q_g ([group][hd]) of KV head g.
// partial: [group][hd + 2] = (unnormalized output, running max, running sum).
void segment_partial(const float* q_g, int64_t group, const KvLayerView& kv, std::span<const BlockId> table,
                     int64_t p_begin, int64_t p_end, const AttentionParams& params, int64_t g, float* partial,
                     float* scratch, Isa isa) {
  const int64_t hd = kv.head_dim;
  const KernelTable& k = kernel_table(isa);
  float* k_tile = scratch;                       // [tile][hd]
  float* v_tile = k_tile + kAttentionTile * hd;  // [tile][hd]
  float* scores = v_tile + kAttentionTile * hd;  // [group][tile]
  const float* v_rows[kAttentionTile];
  start_partial(partial, group, hd);
  for (int64_t t0 = p_begin; t0 < p_end; t0 += kAttentionTile) {
    const int64_t nt = std::min(kAttentionTile, p_end - t0);
    // The tile's K/V rows of this KV head, converted once for all the group's query heads.
    load_tile(k, kv, table, t0, nt, g, k_tile, v_tile, v_rows);
    // All the group's scores for the tile at once (a small GEMM on vector paths).
    k.tile_scores(k_tile, nt, q_g, group, hd, scores, kAttentionTile);
    for (int64_t j = 0; j < group; ++j) {
      softmax_tile(k, scores + j * kAttentionTile, nt, params, v_rows, partial + j * (hd + 2), hd);
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

// out[j][i] = the merged partial's output i of query head j over its sum. merged: [group][hd + 2];
// out: [group][hd].
void normalize(const float* merged, int64_t group, int64_t hd, float* out) {
  for (int64_t j = 0; j < group; ++j) {
    const float* pj = merged + j * (hd + 2);
    const float inv = 1.0f / pj[hd + 1];
    float* o = out + j * hd;
    for (int64_t i = 0; i < hd; ++i) o[i] = pj[i] * inv;
  }
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
      segment_partial(q_g, group, kv, table, p0, p1, p, g, s == s0 ? merged : seg, tile_scratch, isa);
      if (s > s0) {
        for (int64_t j = 0; j < group; ++j) merge_into(merged + j * (hd + 2), seg + j * (hd + 2), hd);
      }
    }
    normalize(merged, group, hd, out.data() + g * group * hd);
  }
}

void attention_tokens(std::span<const float> q, int64_t n_q, int64_t n_heads, const KvLayerView& kv,
                      std::span<const BlockId> table, std::span<const int64_t> n_ctx, const AttentionParams& p,
                      std::span<float> out, std::span<float> scratch, int64_t kv_head, Isa isa) {
  const int64_t hd = kv.head_dim;
  const int64_t group = kv.n_kv_heads > 0 ? n_heads / kv.n_kv_heads : 0, rows = n_q * group;
  int64_t max_ctx = 0;
  bool ctx_ok = n_q >= 1 && static_cast<int64_t>(n_ctx.size()) == n_q;
  for (int64_t c : n_ctx) {
    ctx_ok = ctx_ok && c >= 1;
    max_ctx = std::max(max_ctx, c);
  }
  if (!ctx_ok || p.window != 0 || static_cast<int64_t>(q.size()) != n_q * n_heads * hd || out.size() != q.size() ||
      kv_head < 0 || kv_head >= kv.n_kv_heads ||
      static_cast<int64_t>(scratch.size()) < attention_tokens_scratch_floats(n_q, group, hd)) {
    throw std::invalid_argument("attention_tokens: sizes do not match");
  }
  check_shapes(n_heads * hd, n_heads, kv, table, max_ctx, p, isa);
  const KernelTable& k = kernel_table(isa);
  float* k_tile = scratch.data();                  // [tile][hd]
  float* v_tile = k_tile + kAttentionTile * hd;    // [tile][hd]
  float* q_rows = v_tile + kAttentionTile * hd;    // [n_q][group][hd]: KV head kv_head's query rows
  float* scores = q_rows + rows * hd;              // [n_q][group][tile]
  float* merged = scores + rows * kAttentionTile;  // [n_q][group][hd + 2]
  float* seg = merged + rows * (hd + 2);           // [n_q][group][hd + 2]
  const float* v_rows[kAttentionTile];
  const int64_t part = attention_partial_floats(group, hd);
  for (int64_t u = 0; u < n_q; ++u) {
    const float* src = q.data() + (u * n_heads + kv_head * group) * hd;
    std::copy(src, src + group * hd, q_rows + u * group * hd);
  }
  // attention()'s segments, tiles and steps for every token at once: a tile is converted once and
  // scored for every query row; each token then takes the tile's first positions below its own
  // segment end, exactly the tile attention() gives it alone.
  for (int64_t s = 0; s < attention_segments(max_ctx); ++s) {
    const int64_t p0 = s * kAttentionSegment, p1 = std::min(max_ctx, p0 + kAttentionSegment);
    for (int64_t u = 0; u < n_q; ++u) {
      if (n_ctx[static_cast<size_t>(u)] > p0) start_partial((s == 0 ? merged : seg) + u * part, group, hd);
    }
    for (int64_t t0 = p0; t0 < p1; t0 += kAttentionTile) {
      const int64_t nt = std::min(kAttentionTile, p1 - t0);
      load_tile(k, kv, table, t0, nt, kv_head, k_tile, v_tile, v_rows);
      k.tile_scores(k_tile, nt, q_rows, rows, hd, scores, kAttentionTile);
      for (int64_t u = 0; u < n_q; ++u) {
        const int64_t end = std::min(n_ctx[static_cast<size_t>(u)], p0 + kAttentionSegment);
        if (end <= t0) continue;
        float* partial = (s == 0 ? merged : seg) + u * part;
        for (int64_t j = 0; j < group; ++j) {
          softmax_tile(k, scores + (u * group + j) * kAttentionTile, std::min(nt, end - t0), p, v_rows,
                       partial + j * (hd + 2), hd);
        }
      }
    }
    if (s == 0) continue;
    for (int64_t u = 0; u < n_q; ++u) {
      if (n_ctx[static_cast<size_t>(u)] <= p0) continue;
      for (int64_t j = 0; j < group; ++j)
        merge_into(merged + u * part + j * (hd + 2), seg + u * part + j * (hd + 2), hd);
    }
  }
  for (int64_t u = 0; u < n_q; ++u)
    normalize(merged + u * part, group, hd, out.data() + (u * n_heads + kv_head * group) * hd);
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
  segment_partial(q.data() + kv_head * group * hd, group, kv, table, p0, p1, p, kv_head, partial.data(), scratch.data(),
                  isa);
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
  normalize(merged, group, hd, out.data() + kv_head * group * hd);
}

}  // namespace peregrine
