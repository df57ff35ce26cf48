#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace peregrine {
namespace {

using test::random_vec;

TEST(RmsNorm, MatchesFormula) {
  for (size_t n : {1u, 5u, 64u, 173u}) {
    auto x = random_vec(n, 1 + n, -3, 3), w = random_vec(n, 2 + n);
    std::vector<float> out(n);
    rmsnorm(x, w, 1e-5f, out);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-5);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], x[i] * inv * w[i], 1e-5 * (1 + std::fabs(x[i] * inv)));
  }
}

TEST(SwiGlu, MatchesFormula) {
  auto g = random_vec(37, 3, -6, 6), u = random_vec(37, 4, -2, 2);
  std::vector<float> out(37);
  swiglu(g, u, out);
  for (size_t i = 0; i < g.size(); ++i) {
    const double silu = g[i] / (1.0 + std::exp(-double(g[i])));
    EXPECT_NEAR(out[i], silu * u[i], 1e-5);
  }
}

TEST(Softmax, MatchesFormulaAndHandlesLargeInputs) {
  auto x = random_vec(29, 5, -50, 80);
  auto y = x;
  softmax(y);
  double mx = -1e30, sum = 0;
  for (float v : x) mx = std::max(mx, double(v));
  for (float v : x) sum += std::exp(double(v) - mx);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], std::exp(double(x[i]) - mx) / sum, 1e-6);
}

// Direct formula: theta_i = freq_scale * pos * base^(-2i/rope_dim) / ff_i, in double.
std::vector<float> rope_reference(const std::vector<float>& x, int64_t n_heads, int64_t head_dim, int64_t pos,
                                  const RopeParams& p) {
  std::vector<float> y = x;
  const int64_t half = p.rope_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      double theta = double(p.freq_scale) * double(pos) * std::pow(double(p.freq_base), -2.0 * double(i) / double(p.rope_dim));
      if (!p.freq_factors.empty()) theta /= p.freq_factors[i];
      const int64_t a = h * head_dim + (p.style == RopeStyle::Neox ? i : 2 * i);
      const int64_t b = a + (p.style == RopeStyle::Neox ? half : 1);
      y[a] = float(x[a] * std::cos(theta) - x[b] * std::sin(theta));
      y[b] = float(x[a] * std::sin(theta) + x[b] * std::cos(theta));
    }
  }
  return y;
}

TEST(Rope, BothStylesMatchDirectFormula) {
  const std::vector<float> factors = {1.f, 1.5f, 2.f, 4.f, 8.f, 1.f};
  for (RopeStyle style : {RopeStyle::Adjacent, RopeStyle::Neox}) {
    for (int64_t head_dim : {8, 12}) {
      for (int64_t rope_dim : {head_dim, int64_t{4}}) {
        for (bool use_factors : {false, true}) {
          if (use_factors && rope_dim != 12) continue;
          for (int64_t pos : {0, 1, 7, 93}) {
            RopeParams p;
            p.style = style;
            p.rope_dim = rope_dim;
            p.freq_base = 10000.f;
            p.freq_scale = use_factors ? 0.5f : 1.f;
            if (use_factors) p.freq_factors = factors;
            const int64_t n_heads = 3;
            auto x = random_vec(size_t(n_heads * head_dim), uint32_t(pos + 10 * head_dim + rope_dim));
            auto y = x;
            std::vector<float> cs(static_cast<size_t>(rope_dim));
            rope_angles(pos, p, cs);
            rope_apply(y, n_heads, head_dim, p, cs);
            auto ref = rope_reference(x, n_heads, head_dim, pos, p);
            for (size_t i = 0; i < y.size(); ++i) {
              ASSERT_NEAR(y[i], ref[i], 2e-4) << "style=" << int(style) << " hd=" << head_dim << " rd=" << rope_dim
                                               << " pos=" << pos << " i=" << i;
            }
          }
        }
      }
    }
  }
}

TEST(Rope, StylesDiffer) {
  // Guards against both styles silently taking the same pairing.
  RopeParams p;
  p.rope_dim = 8;
  auto x = random_vec(8, 9);
  std::vector<float> cs(8), a = x, b = x;
  rope_angles(5, p, cs);
  rope_apply(a, 1, 8, p, cs);
  p.style = RopeStyle::Neox;
  rope_apply(b, 1, 8, p, cs);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace peregrine
