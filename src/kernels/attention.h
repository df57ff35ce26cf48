#pragma once
// Causal self-attention of one query token over a sequence's cached K/V, read through the
// sequence's block table (paged layout, see kv/kv_cache.h).
#include <cstdint>
#include <span>

#include "kernels/isa.h"
#include "kv/kv_cache.h"

namespace peregrine {

// Floats of scratch attention() needs.
inline int64_t attention_scratch_floats(int64_t n_heads, int64_t head_dim) { return 2 * head_dim + 2 * n_heads; }

// out[h] = sum_p softmax_p(q[h] . k[p] * scale) v[p] over positions p in [0, n_ctx), with
// query head h reading KV head h / (n_heads / n_kv_heads) (MHA, GQA and MQA alike).
// Online softmax (running max and sum per head) in position order, so no score row is stored and
// the result depends only on this sequence's data.
// q:       [n_heads][head_dim] (RoPE already applied)
// kv:      one layer of the cache; kv.n_kv_heads must divide n_heads
// table:   the sequence's block ids; must cover n_ctx positions
// out:     [n_heads][head_dim]
// scratch: [attention_scratch_floats(n_heads, head_dim)]
void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, float scale, std::span<float> out, std::span<float> scratch);

// The same for the query heads of KV heads [kv_head_begin, kv_head_end) only, on the given ISA
// path; other heads' outputs are left untouched. Heads are independent, so splitting a token's
// heads among threads gives results bit-identical to one call over all heads.
void attention(std::span<const float> q, int64_t n_heads, const KvLayerView& kv, std::span<const BlockId> table,
               int64_t n_ctx, float scale, std::span<float> out, std::span<float> scratch, int64_t kv_head_begin,
               int64_t kv_head_end, Isa isa);

}  // namespace peregrine
