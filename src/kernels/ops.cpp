#include "kernels/ops.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/isa.h"
#include "kernels/kernel_table.h"

namespace peregrine {

void rmsnorm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out) {
  if (weight.size() != x.size() || out.size() != x.size()) throw std::invalid_argument("rmsnorm: size mismatch");
  // Eight partial sums (element i into part i % 8), a fixed tree, then the tail in order: the
  // compiler runs the parts as vector lanes (one long chain of dependent adds took a third of a
  // microsecond per row, serial work in every step), and every CPU gets the same bits. A float's
  // square is exact in double, so contracting into fused multiply-adds changes nothing.
  // (Named accumulators: as an array the compiler kept them in memory, one store and reload per
  // step.)
  const auto sq = [&](size_t i) { return static_cast<double>(x[i]) * static_cast<double>(x[i]); };
  double p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0, p5 = 0, p6 = 0, p7 = 0;
  const size_t n = x.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    p0 += sq(i), p1 += sq(i + 1), p2 += sq(i + 2), p3 += sq(i + 3);
    p4 += sq(i + 4), p5 += sq(i + 5), p6 += sq(i + 6), p7 += sq(i + 7);
  }
  double ss = ((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7));
  for (; i < n; ++i) ss += sq(i);
  const float mean = static_cast<float>(ss / static_cast<double>(x.size()));
  const float scale = 1.0f / std::sqrt(mean + eps);
  // Four at a time through a temporary, so the loop runs in vector lanes although out may alias x
  // (read before written, element by element, as the one-at-a-time loop does).
  for (i = 0; i + 4 <= n; i += 4) {
    float t[4];
    for (size_t j = 0; j < 4; ++j) t[j] = (x[i + j] * scale) * weight[i + j];
    for (size_t j = 0; j < 4; ++j) out[i + j] = t[j];
  }
  for (; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
}

void swiglu(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  if (up.size() != gate.size() || out.size() != gate.size()) throw std::invalid_argument("swiglu: size mismatch");
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void geglu(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  if (up.size() != gate.size() || out.size() != gate.size()) throw std::invalid_argument("geglu: size mismatch");
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCubic = 0.044715f;
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCubic * g * g))) * up[i];
  }
}

void apply_glu(Glu glu, std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  if (glu == Glu::Gelu) return geglu(gate, up, out);
  swiglu(gate, up, out);
}

void softcap_in_place(std::span<float> x, float cap) {
  for (float& v : x) v = cap * std::tanh(v / cap);
}

void scale_in_place(std::span<float> x, float s) {
  for (float& v : x) v *= s;
}

double sum_exp(std::span<const float> x, float max) {
  return kernel_table(active_isa()).sum_exp(x.data(), max, static_cast<int64_t>(x.size()));
}

void softmax(std::span<float> x) {
  if (x.empty()) return;
  float max = -std::numeric_limits<float>::infinity();
  for (float v : x) max = std::max(max, v);
  double sum = 0.0;
  for (float& v : x) {
    v = std::exp(v - max);
    sum += v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

void add_in_place(std::span<float> x, std::span<const float> b) {
  if (b.size() != x.size()) throw std::invalid_argument("add_in_place: size mismatch");
  for (size_t i = 0; i < x.size(); ++i) x[i] += b[i];
}

void rope_angles(int64_t pos, const RopeParams& p, std::span<float> cos_sin) {
  const int64_t n_pairs = p.rope_dim / 2;
  if (static_cast<int64_t>(cos_sin.size()) < 2 * n_pairs ||
      (!p.freq_factors.empty() && static_cast<int64_t>(p.freq_factors.size()) != n_pairs)) {
    throw std::invalid_argument("rope_angles: size mismatch");
  }
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.rope_dim));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_pairs; ++i) {
    const float ff = p.freq_factors.empty() ? 1.0f : p.freq_factors[static_cast<size_t>(i)];
    const float angle = p.freq_scale * (theta / ff);
    cos_sin[static_cast<size_t>(2 * i)] = std::cos(angle);
    cos_sin[static_cast<size_t>(2 * i + 1)] = std::sin(angle);
    theta *= theta_scale;
  }
}

void rope_apply(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p,
                std::span<const float> cos_sin) {
  const int64_t n_pairs = p.rope_dim / 2;
  if (static_cast<int64_t>(x.size()) != n_heads * head_dim || p.rope_dim > head_dim || p.rope_dim % 2 != 0 ||
      static_cast<int64_t>(cos_sin.size()) < 2 * n_pairs) {
    throw std::invalid_argument("rope_apply: size mismatch");
  }
  // Neox rotates element i with i + rope_dim/2; Adjacent rotates 2i with 2i+1.
  const int64_t stride = p.style == RopeStyle::Neox ? n_pairs : 1;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x.data() + h * head_dim;
    for (int64_t i = 0; i < n_pairs; ++i) {
      const int64_t i0 = p.style == RopeStyle::Neox ? i : 2 * i;
      const float c = cos_sin[static_cast<size_t>(2 * i)];
      const float s = cos_sin[static_cast<size_t>(2 * i + 1)];
      const float x0 = head[i0];
      const float x1 = head[i0 + stride];
      head[i0] = x0 * c - x1 * s;
      head[i0 + stride] = x0 * s + x1 * c;
    }
  }
}

}  // namespace peregrine
