// Figure 10.1 on the server's side: the page's matrices (the same LCG, the same seed) multiplied by
// the naive triple loop and by the tuned kernel the model uses (f32 weights, and q8_0 weights with
// 8-bit activations), one thread each, timed as `peregrine roofline` times them
// (kernels/matmul_timing.h), with the checksum the page compares its own results against.
#include <cmath>

#include "format/tensor_type.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/matmul_timing.h"
#include "server/api_error.h"
#include "server/lab_run.h"

namespace peregrine::server::lab {
namespace {

using nlohmann::json;

constexpr int64_t kMaxSide = 1024;
constexpr int64_t kMaxMultiplyAdds = int64_t{1} << 27;  // the naive loop: a fraction of a second

struct Shape {
  int64_t m, k, n;  // x: [m][k] (the page's A), W: [n][k] (the page's B, row per output), y: [m][n]
  uint32_t seed;
};

json point(const char* name, const Shape& s, double seconds, double weight_bytes, const LabOptions& o,
           bool int8 = false) {
  const double flops = 2.0 * static_cast<double>(s.m * s.k * s.n);
  const double bytes = weight_bytes + 4.0 * static_cast<double>(s.m * (s.k + s.n));
  json j = {{"kernel", name}, {"seconds", seconds}, {"gflops", flops / seconds / 1e9}, {"intensity", flops / bytes}};
  if (o.roof) {
    const double peak = int8 && o.roof->peak_int8 > 0 ? o.roof->peak_int8 : o.roof->peak_f32;
    j["roof_gflops"] = std::min(peak, o.roof->bandwidth * flops / bytes) / 1e9;
  }
  return j;
}

json run(const Shape& s, const LabOptions& o) {
  const std::vector<float> x = lcg_floats(s.m * s.k, s.seed);
  const std::vector<float> w = lcg_floats(s.n * s.k, s.seed + 1);
  std::vector<float> y_naive(static_cast<size_t>(s.m * s.n)), y(static_cast<size_t>(s.m * s.n));
  const auto [naive_s, naive_reps] =
      time_calls([&] { naive_matmul(w.data(), x.data(), y_naive.data(), s.m, s.n, s.k); }, 3, 0.02);

  TensorView view;
  view.name = "lab.w";
  view.type = TensorType::F32;
  view.shape = {s.k, s.n};
  view.data = std::as_bytes(std::span(w));
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(s.k, 1)));
  const Isa isa = active_isa();
  const auto [tuned_s, tuned_reps] =
      time_calls([&] { matmul(view, x, y, s.m, scratch, nullptr, isa, Activations::F32, {}); }, 5, 0.02);

  json points = json::array({point("naive", s, naive_s, 4.0 * static_cast<double>(s.n * s.k), o),
                             point("tuned f32", s, tuned_s, 4.0 * static_cast<double>(s.n * s.k), o)});
  double diff = 0, sum = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(y[i] - y_naive[i])));
    sum += y_naive[i];
  }
  // The model's arithmetic: weights in 8-bit blocks, activations rounded to 8 bits on the fly.
  if (s.k % 32 == 0) {
    std::vector<std::byte> q(tensor_bytes(TensorType::Q8_0, s.n * s.k));
    quantize_row(TensorType::Q8_0, w.data(), q.data(), s.n * s.k);
    TensorView qv = view;
    qv.type = TensorType::Q8_0;
    qv.data = q;
    std::vector<Q8Block> act(static_cast<size_t>(act_scratch_blocks(s.m, s.k)));
    std::vector<float> yq(y.size());
    const auto [q_s, q_reps] =
        time_calls([&] { matmul(qv, x, yq, s.m, scratch, nullptr, isa, Activations::Q8, act); }, 5, 0.02);
    points.push_back(point("tuned q8_0", s, q_s, static_cast<double>(q.size()), o, true));
  }
  json sample = json::array();
  for (size_t i = 0; i < std::min<size_t>(8, y_naive.size()); ++i) sample.push_back(y_naive[i]);
  return {
      {"m", s.m},     {"k", s.k},         {"n", s.n},        {"seed", s.seed},   {"isa", isa_name(isa)},
      {"threads", 1}, {"points", points}, {"checksum", sum}, {"sample", sample}, {"max_abs_diff_tuned_vs_naive", diff}};
}

}  // namespace

LabJob matmul(const Context& c, const nlohmann::json& body) {
  Shape s{int_field(body, "m", 1, kMaxSide, 128), int_field(body, "k", 1, kMaxSide, 128),
          int_field(body, "n", 1, kMaxSide, 128), static_cast<uint32_t>(int_field(body, "seed", 0, 1 << 30, 1))};
  if (s.m * s.k * s.n > kMaxMultiplyAdds) {
    throw invalid_request("m x k x n is at most " + std::to_string(kMaxMultiplyAdds) + " multiply-adds", "m");
  }
  return [s, &o = c.options] { return run(s, o); };
}

}  // namespace peregrine::server::lab
