#pragma once
// Causal self-attention of one query token over a sequence's cached K/V, read through the
// sequence's block table (paged layout, see kv/block_pool.h).
//
// The arithmetic, FlashAttention-style: positions are taken in tiles of kAttentionTile; a tile's
// scores are computed together, the running maximum is raised once per tile (rescaling the
// accumulated sum and output when it grows), and no score row longer than a tile ever exists.
// Tiles are grouped into segments of kAttentionSegment positions, each giving a partial result
// (its maximum, its sum of exponentials, its unnormalized output); the final result is the
// partials merged in segment order. Flash-Decoding computes a long sequence's segments on
// different threads and merges them afterwards; computing them one after another in a single
// call gives the same bits, because segment boundaries sit at fixed absolute positions and the
// merge order is fixed. So a token's result never depends on the thread count, the batch, or
// whether its keys were split.
#include <cstdint>
#include <span>

#include "kernels/isa.h"
#include "kv/host_kv_storage.h"

namespace peregrine {

inline constexpr int64_t kAttentionTile = 32;      // positions scored together
inline constexpr int64_t kAttentionSegment = 256;  // positions per Flash-Decoding split (a multiple of the tile)

// How a query's scores are formed beyond q . k, and which keys it sees besides the causal bound.
// Converts from a plain scale, so callers without a window or cap pass just that.
struct AttentionParams {
  float scale = 1.f;    // score = q . k * scale
  int64_t window = 0;   // 0: every position [0, n_ctx); W > 0: the last W only, [n_ctx - W, n_ctx) (sliding
                        // window: the query at p sees keys in (p - W, p], as llama.cpp's LLAMA_SWA_TYPE_STANDARD)
  float softcap = 0.f;  // 0: none; c > 0: score = c * tanh(score / c) (Gemma 2's attention logit soft-capping)

  AttentionParams(float scale_, int64_t window_ = 0, float softcap_ = 0.f)  // NOLINT(google-explicit-constructor)
      : scale(scale_), window(window_), softcap(softcap_) {}
};

// Segments covering positions [0, n_ctx) (their absolute boundaries do not move with a window).
inline int64_t attention_segments(int64_t n_ctx) { return (n_ctx + kAttentionSegment - 1) / kAttentionSegment; }
// The first position a query with n_ctx positions attends under `window`, and its segment: segments
// before it are skipped, so a long sequence with a small window reads only the window's blocks.
inline int64_t attention_first_position(int64_t n_ctx, int64_t window) {
  return window > 0 && n_ctx > window ? n_ctx - window : 0;
}
inline int64_t attention_first_segment(int64_t n_ctx, int64_t window) {
  return attention_first_position(n_ctx, window) / kAttentionSegment;
}

// Floats of scratch attention() and attention_segment() need.
inline int64_t attention_scratch_floats(int64_t n_heads, int64_t head_dim) {
  return 2 * kAttentionTile * head_dim + n_heads * kAttentionTile + 2 * n_heads * (head_dim + 2);
}

// Floats of one partial result for the query heads of one KV head: [group][head_dim + 2]
// (head_dim unnormalized outputs, then the maximum score and the sum of exponentials).
inline int64_t attention_partial_floats(int64_t group, int64_t head_dim) { return group * (head_dim + 2); }

// out[h] = sum_p softmax_p(score(q[h], k[p])) v[p] over positions p in
// [attention_first_position(n_ctx, window), n_ctx), score as AttentionParams says, with
// query head h reading KV head h / (n_heads / n_kv_heads) (MHA, GQA and MQA alike).
// q:       [n_heads][head_dim] (RoPE already applied)
// kv:      one layer of the cache; kv.n_kv_heads must divide n_heads
// table:   the sequence's block ids; must cover n_ctx positions (entries before the window's first
//          block are never read: they may be kNoBlock once the block manager freed them)
// out:     [n_heads][head_dim]
// scratch: [attention_scratch_floats(n_heads, head_dim)]
void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, const AttentionParams& p, std::span<float> out, std::span<float> scratch);

// The same for the query heads of KV heads [kv_head_begin, kv_head_end) only, on the given ISA
// path; other heads' outputs are left untouched. Heads are independent, so splitting a token's
// heads among threads gives results bit-identical to one call over all heads.
void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, const AttentionParams& p, std::span<float> out, std::span<float> scratch,
               int64_t kv_head_begin, int64_t kv_head_end, Isa isa);

// Floats of scratch attention_tokens() needs for n_q tokens and `group` query heads per KV head.
inline int64_t attention_tokens_scratch_floats(int64_t n_q, int64_t group, int64_t head_dim) {
  return 2 * kAttentionTile * head_dim + n_q * group * (head_dim + kAttentionTile) + 2 * n_q * group * (head_dim + 2);
}

// attention() for the query heads of KV head `kv_head` of n_q tokens of one sequence at once (a
// prefill chunk): token u's query q[u] attends positions [0, n_ctx[u]) of the same table. Each K/V
// tile is converted once for all the tokens and scored for all their query heads in one call;
// every output has the bits attention() gives its token alone (the same tiles, segments and steps,
// and a score does not depend on the other rows of its call). No sliding window (p.window == 0):
// with one, tiles start at each token's own first position.
// q, out: [n_q][n_heads][head_dim]; n_ctx: [n_q], each >= 1 and covered by table;
// scratch: [attention_tokens_scratch_floats(n_q, n_heads / kv.n_kv_heads, head_dim)]
void attention_tokens(std::span<const float> q, int64_t n_q, int64_t n_heads, const KvLayerView& kv,
                      std::span<const BlockId> table, std::span<const int64_t> n_ctx, const AttentionParams& p,
                      std::span<float> out, std::span<float> scratch, int64_t kv_head, Isa isa);

// Flash-Decoding, step 1: the partial result of segment `segment` (positions
// [max(first, segment * kAttentionSegment), min(n_ctx, (segment + 1) * kAttentionSegment)), first =
// attention_first_position) for the query heads of KV head `kv_head`; segment must lie in
// [attention_first_segment, attention_segments). partial: [attention_partial_floats(group, head_dim)].
void attention_segment(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
                       int64_t n_ctx, const AttentionParams& p, int64_t kv_head, int64_t segment,
                       std::span<float> partial, std::span<float> scratch, Isa isa);

// Flash-Decoding, step 2: merges n_segments partials in order (segments first_segment, first_segment + 1,
// ... of the query) and writes the
// normalized outputs of KV head `kv_head`'s query heads into out ([n_heads][head_dim]).
// partials: [n_segments][attention_partial_floats(group, head_dim)]; merged in place.
void attention_merge(std::span<float> partials, int64_t n_segments, int64_t n_heads, int64_t head_dim,
                     int64_t n_kv_heads, int64_t kv_head, std::span<float> out);

}  // namespace peregrine
