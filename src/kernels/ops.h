#pragma once
// Element-wise and per-row kernels of the transformer block, one token row at a time.
#include <cstdint>
#include <span>


namespace peregrine {

// out = x / sqrt(mean(x^2) + eps) * weight. Sum of squares in double: eight partial sums
// (element i into part i % 8), combined ((0+4)+(1+5))+((2+6)+(3+7)), then the tail in order.
// x, weight, out: [n] (out may alias x)
void rmsnorm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).
// gate, up, out: [n] (out may alias gate or up)
void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> out);

// out[i] = gelu(gate[i]) * up[i] with gelu's tanh form (ggml_gelu, Gemma's GeGLU):
// gelu(g) = g / 2 * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 g^3))).
// gate, up, out: [n] (out may alias gate or up)
void geglu(std::span<const float> gate, std::span<const float> up, std::span<float> out);

// The activation of a gated feed-forward: out = act(gate) * up.
enum class Glu {
  Silu,  // swiglu (Llama, Qwen, Mistral)
  Gelu,  // geglu (Gemma)
};
// swiglu or geglu as `glu` says. gate, up, out: [n] (out may alias gate or up)
void apply_glu(Glu glu, std::span<const float> gate, std::span<const float> up, std::span<float> out);

// x[i] = cap * tanh(x[i] / cap) (Gemma's logit soft-capping). x: [n]; cap > 0
void softcap_in_place(std::span<float> x, float cap);

// x[i] *= s. x: [n]
void scale_in_place(std::span<float> x, float s);

// sum_i e^(x[i] - max) in double, each term by the vector exp of this CPU's kernels (a relative
// error of ~2e-7 per term; -inf terms add 0): the host's log-sum-exp over a row of logits
// (sampling's reported logprobs). x: [n]
double sum_exp(std::span<const float> x, float max);

// In-place softmax of x: [n] (max subtracted first; sum in double).
void softmax(std::span<float> x);

// x += b. x, b: [n]
void add_in_place(std::span<float> x, std::span<const float> b);

// How RoPE pairs up the elements of a head (exactly as llama.cpp applies it per architecture):
//   Adjacent (llama, ggml "normal" mode): rotates (x[2i], x[2i+1]),
//   Neox     (qwen2, ggml "neox" mode):   rotates (x[i], x[i + head_dim/2]).
// Both use theta_i = pos * freq_base^(-2i/rope_dim) / freq_factor[i].
enum class RopeStyle { Adjacent, Neox };

struct RopeParams {
  RopeStyle style = RopeStyle::Adjacent;
  int64_t rope_dim = 0;                 // rotated elements per head (even, <= head_dim)
  float freq_base = 10000.f;
  float freq_scale = 1.f;
  std::span<const float> freq_factors;  // [rope_dim / 2] or empty
};

// Rotation of each pair at position `pos`, exactly as ggml_rope_ext computes it (no YaRN):
// theta_i = freq_scale * (pos * base^(-2i/rope_dim), accumulated by repeated f32 multiplication)
// / freq_factors[i].
// cos_sin: [rope_dim / 2][2] = (cos theta_i, sin theta_i)
void rope_angles(int64_t pos, const RopeParams& p, std::span<float> cos_sin);

// Rotates the first rope_dim elements of every head of one token; the rest pass through.
// Adjacent pairs (x[2i], x[2i+1]); Neox pairs (x[i], x[i + rope_dim/2]).
// x: [n_heads][head_dim], cos_sin: [rope_dim / 2][2] from rope_angles
void rope_apply(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p,
                std::span<const float> cos_sin);

}  // namespace peregrine
