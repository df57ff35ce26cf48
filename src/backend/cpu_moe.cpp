// CpuContext's mixture-of-experts operations: routing, row gather / combine and the experts'
// matmuls, each expert's weights read once for all the rows routed to it.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "backend/cpu_context.h"

namespace peregrine {
namespace {

template <class T>
std::span<T> row_of(std::span<T> m, int64_t t, int64_t width) {
  return m.subspan(static_cast<size_t>(t * width), static_cast<size_t>(width));
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("cpu context: ") + what);
}

}  // namespace

void CpuContext::route_experts(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                               std::span<float> weights) {
  const int64_t e = r.n_experts, k = r.n_used;
  const auto n = static_cast<int64_t>(logits.size()) / std::max<int64_t>(e, 1);
  require(e >= 1 && static_cast<int64_t>(logits.size()) == n * e && static_cast<int64_t>(experts.size()) == n * k &&
              static_cast<int64_t>(weights.size()) == n * k,
          "route_experts: sizes do not match");
  for (int64_t t = 0; t < n; ++t) route_token(row_of(logits, t, e), r, row_of(experts, t, k), row_of(weights, t, k));
}

void CpuContext::gather_rows(std::span<const float> x, std::span<const int32_t> rows, std::span<float> out,
                             int64_t width) {
  const auto n = static_cast<int64_t>(x.size()) / std::max<int64_t>(width, 1);
  require(width >= 1 && out.size() == rows.size() * static_cast<size_t>(width), "gather_rows: sizes do not match");
  for (size_t i = 0; i < rows.size(); ++i) {
    require(rows[i] >= 0 && rows[i] < n, "gather_rows: row out of range");
    const auto src = row_of(x, rows[i], width);
    std::copy(src.begin(), src.end(), row_of(out, static_cast<int64_t>(i), width).begin());
  }
}

void CpuContext::matmul_experts(const TensorView& w, std::span<const int64_t> offsets, std::span<const float> x,
                                std::span<float> y) {
  require(w.shape.size() == 3 && static_cast<int64_t>(offsets.size()) == w.shape[2] + 1 && offsets.front() == 0,
          "matmul_experts: offsets do not match the experts");
  const int64_t n_in = w.shape[0], n_out = w.shape[1], m = offsets.back();
  require(static_cast<int64_t>(x.size()) == m * n_in && static_cast<int64_t>(y.size()) == m * n_out,
          "matmul_experts: sizes do not match");
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(offsets.size()); ++e) {
    const int64_t r0 = offsets[static_cast<size_t>(e)], r1 = offsets[static_cast<size_t>(e) + 1];
    require(r0 <= r1, "matmul_experts: offsets decrease");
    if (r0 == r1) continue;
    matmul(w.matrix(e), x.subspan(static_cast<size_t>(r0 * n_in), static_cast<size_t>((r1 - r0) * n_in)),
           y.subspan(static_cast<size_t>(r0 * n_out), static_cast<size_t>((r1 - r0) * n_out)), r1 - r0);
  }
}

// One pass in row order: each token's terms are added in the order its rows appear.
void CpuContext::combine_rows(std::span<const float> y, std::span<const int32_t> rows, std::span<const float> scales,
                              std::span<float> out, int64_t width) {
  const auto n = static_cast<int64_t>(out.size()) / std::max<int64_t>(width, 1);
  require(width >= 1 && y.size() == rows.size() * static_cast<size_t>(width) && scales.size() == rows.size(),
          "combine_rows: sizes do not match");
  std::fill(out.begin(), out.end(), 0.f);
  for (size_t i = 0; i < rows.size(); ++i) {
    require(rows[i] >= 0 && rows[i] < n, "combine_rows: row out of range");
    const auto src = row_of(y, static_cast<int64_t>(i), width);
    const auto dst = row_of(out, rows[i], width);
    const float s = scales[i];
    for (int64_t j = 0; j < width; ++j) dst[static_cast<size_t>(j)] += s * src[static_cast<size_t>(j)];
  }
}

void CpuContext::sigmoid_gate(std::span<float> x, std::span<const float> gate, int64_t n) {
  if (n == 0) return;
  require(n > 0 && static_cast<int64_t>(gate.size()) == n && x.size() % static_cast<size_t>(n) == 0,
          "sigmoid_gate: sizes do not match");
  const int64_t width = static_cast<int64_t>(x.size()) / n;
  for (int64_t t = 0; t < n; ++t) {
    const float g = 1.f / (1.f + std::exp(-gate[static_cast<size_t>(t)]));
    for (float& v : row_of(x, t, width)) v *= g;
  }
}

}  // namespace peregrine
