#pragma once
// How a mixture-of-experts router turns one token's logits over E experts into k (expert, weight)
// pairs, as llama.cpp's build_moe_ffn does for the architectures peregrine runs:
//   1. probabilities p = softmax(logits) over all E (Softmax), sigmoid(logits) (Sigmoid), or the
//      logits themselves (SoftmaxTopK: the softmax comes after the selection, over the k chosen);
//   2. the k largest p are selected; among equal values the LOWEST expert index wins, so the
//      choice depends on the token's logits alone, never on the batch;
//   3. the weights are the selected p (SoftmaxTopK: their softmax), divided by their sum when
//      `normalize` (the sum clamped below at 2^-14, llama.cpp's guard against 0), times `scale`.
// A NaN logit is never selected while a number is available.
// The result lists the k experts in ascending index order (the order their outputs are summed
// in, which makes a token's sum independent of everything else in the step).
#include <cstdint>
#include <span>

namespace peregrine {

// llama.cpp's limit (LLAMA_MAX_EXPERTS); also bounds the router's per-token scratch.
inline constexpr int64_t kMaxExperts = 512;

enum class MoeGating { Softmax, Sigmoid, SoftmaxTopK };

struct MoeRouting {
  int64_t n_experts = 0;  // E, in [1, kMaxExperts]
  int64_t n_used = 0;     // k, in [1, E]
  MoeGating gating = MoeGating::Softmax;
  bool normalize = false;
  float scale = 1.f;
};

// One token. logits: [E]; experts: [k] (ascending); weights: [k] (experts[i]'s weight).
// Throws std::invalid_argument for sizes that do not match `r`.
void route_token(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                 std::span<float> weights);

}  // namespace peregrine
