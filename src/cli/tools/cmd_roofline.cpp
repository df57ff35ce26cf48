// `peregrine roofline`: what this machine allows (read bandwidth, peak f32 and int8
// multiply-add rates, the ridge points between them) and where the matmul kernels sit under that
// roof: a naive triple loop (the "before" point) and the tuned kernels for each weight type, as
// matrix × vector (decode) and matrix × matrix (prefill), each at its arithmetic intensity.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tools/roofline_svg.h"
#include "format/model_file.h"
#include "format/tensor_type.h"
#include "kernels/isa.h"
#include "kernels/machine_probe.h"
#include "kernels/matmul.h"
#include "kernels/matmul_timing.h"
#include "kernels/thread_pool.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {


// How much measuring to do. --quick shrinks everything so the test finishes in seconds.
struct Sweep {
  int64_t prefill_n_in, prefill_n_out;              // the matrix prefill multiplies by
  std::vector<int64_t> prefill_tokens;              // batch sizes of the prefill points
  std::vector<std::pair<int64_t, int64_t>> decode;  // {n_out, n_in} of the decode points
  std::vector<int64_t> naive_tokens;                // naive loop on the prefill matrix
  int64_t cold_bytes;                               // each weight set rotates over at least this many bytes
  // Bandwidth probe buffer: above the 32 MB last-level cache of the machines we run on, yet
  // small enough that one pass (a few ms) fits between the scheduler's interruptions on a
  // shared machine; the probe keeps the best of many passes.
  int64_t probe_bytes;
  int probe_reps, peak_reps;  // per probe round (there are two: before and after the kernels)
  int reps;                   // repetitions of each timed point
  double min_rep_s;           // a repetition runs calls until at least this long
};

Sweep full_sweep() {
  return {
      2048, 2048, {16, 64, 256}, {{2048, 2048}, {5632, 2048}}, {1, 16, 64}, int64_t{384} << 20, int64_t{64} << 20, 40,
      40,   7,    0.05};
}

Sweep quick_sweep() {
  return {1024, 1024, {16, 64}, {{1024, 1024}, {2816, 1024}}, {1, 16}, int64_t{96} << 20, int64_t{48} << 20, 32,
          30,   3,    0.004};
}

struct MachineFigures {
  Isa isa;
  double bandwidth = 0;  // bytes/s
  double peak_f32 = 0;   // flop/s
  double peak_int8 = 0;  // op/s, 0 where there is no int8 probe (scalar)
};

struct Point {
  std::string isa;     // "avx2", "scalar", or the naive loop's "naive"
  std::string kernel;  // "tuned" | "naive"
  TensorType weights = TensorType::F32;
  std::string activations;  // "f32" | "q8"
  int64_t n_out = 0, n_in = 0, n_tokens = 0;
  double seconds = 0;  // median per call
  int reps = 0;
  double flops = 0, bytes = 0;
  double peak = 0;        // the ceiling of the arithmetic this kernel uses
  std::string peak_kind;  // "f32" | "int8"
  double bandwidth = 0;

  std::string phase() const { return n_tokens == 1 ? "decode" : "prefill"; }
  double gflops() const { return flops / seconds / 1e9; }
  double gbps() const { return bytes / seconds / 1e9; }
  double intensity() const { return flops / bytes; }
  double roof() const { return std::min(peak, bandwidth * intensity()); }  // flop/s
  double pct_of_roof() const { return 100.0 * flops / seconds / roof(); }
  bool memory_bound() const { return bandwidth * intensity() < peak; }
  std::string series() const {
    return kernel == "naive" ? "naive f32" : std::string(tensor_type_name(weights)) + "/" + activations;
  }
  std::string label() const {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s %s %s %lldx%lldx%lld: %.1f GFLOP/s, %.0f%% of roof", isa.c_str(),
                  series().c_str(), phase().c_str(), static_cast<long long>(n_tokens), static_cast<long long>(n_out),
                  static_cast<long long>(n_in), gflops(), pct_of_roof());
    return buf;
  }
};

// Copies of one weight matrix laid end to end, handed out in turn: consecutive calls read
// matrices that have not been touched for the whole rest of the set, so with a set several times
// the last-level cache each call streams its weights from memory, as decode does.
class ColdWeights {
 public:
  ColdWeights(TensorType type, int64_t n_out, int64_t n_in, int64_t target_bytes, const std::vector<float>& source)
      : bytes_(tensor_bytes(type, n_out * n_in)) {
    const int64_t copies =
        std::max<int64_t>(2, (target_bytes + static_cast<int64_t>(bytes_) - 1) / static_cast<int64_t>(bytes_));
    storage_ = std::make_unique_for_overwrite<std::byte[]>(bytes_ * static_cast<size_t>(copies));
    quantize_row(type, source.data(), storage_.get(), n_out * n_in);
    for (int64_t c = 0; c < copies; ++c) {
      std::byte* dst = storage_.get() + bytes_ * static_cast<size_t>(c);
      if (c > 0) std::memcpy(dst, storage_.get(), bytes_);
      TensorView v;
      v.name = "roofline." + std::to_string(c);
      v.type = type;
      v.shape = {n_in, n_out};
      v.data = {dst, bytes_};
      views_.push_back(std::move(v));
    }
  }
  const TensorView& next() {
    const TensorView& v = views_[next_];
    next_ = (next_ + 1) % views_.size();
    return v;
  }
  size_t matrix_bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::unique_ptr<std::byte[]> storage_;
  std::vector<TensorView> views_;
  size_t next_ = 0;
};

std::vector<Isa> parse_isa_list(const std::string& text) {
  std::vector<Isa> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    std::optional<Isa> isa;
    for (Isa i : kAllIsas) {
      if (item == isa_name(i)) isa = i;
    }
    if (!isa) throw UsageError("--isa: '" + item + "' is not an ISA path (expected a list of scalar, avx2, avx512)");
    if (!isa_supported(*isa)) throw UsageError("--isa: this CPU cannot run the " + item + " path");
    if (std::find(out.begin(), out.end(), *isa) == out.end()) out.push_back(*isa);
    start = comma + 1;
  }
  return out;
}

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

// One sentence: where a point sits against the ridge of its arithmetic, and how far below the
// roof it runs.
std::string describe(const Point& p, const std::string& what) {
  const double ridge = p.peak / p.bandwidth;
  std::string s = what + " (" + p.series() + ", " + std::to_string(p.n_tokens) + "x" + std::to_string(p.n_out) + "x" +
                  std::to_string(p.n_in) + "): " + fmt("%.2f flop/B, ", p.intensity());
  if (p.memory_bound()) {
    s += fmt("%.1fx below the ", ridge / p.intensity()) + p.peak_kind +
         fmt(" ridge (%.1f flop/B): memory-bound; ", ridge);
  } else {
    s += fmt("%.1fx above the ", p.intensity() / ridge) + p.peak_kind +
         fmt(" ridge (%.1f flop/B): compute-bound; ", ridge);
  }
  const std::string unit = p.peak_kind == "int8" ? " GOP/s" : " GFLOP/s";
  s += fmt("%.1f", p.gflops()) + unit + fmt(" = %.0f%% of its roof (%.1f", p.pct_of_roof(), p.roof() / 1e9) + unit;
  s += p.memory_bound() ? fmt(", moving %.1f of %.1f GB/s)", p.gbps(), p.bandwidth / 1e9) : std::string(")");
  return s;
}

struct RooflineOptions {
  int64_t threads = physical_core_count();
  std::vector<Isa> isas;
  bool quick = false, json = false;
  std::optional<std::string> svg_path;
};

// The flags, checked; nullopt when --help was printed.
std::optional<RooflineOptions> parse_roofline_args(const Args& args) {
  RooflineOptions o;
  std::string isa_list;
  ArgParser p("roofline",
              "Measure this machine's roofline (read bandwidth, peak f32 and int8 multiply-add rates,\n"
              "ridge points) and time a naive triple-loop matmul and the tuned kernels (f32, f16, q8_0,\n"
              "q4_0 weights) as matrix x vector (decode) and matrix x matrix (prefill), each point at its\n"
              "arithmetic intensity with its % of the roof. Takes a minute or two; --quick, seconds.");
  p.option("-t,--threads", &o.threads, "N", "threads (physical cores unless given)", 1, 1024);
  p.option("--isa", &isa_list, "LIST", "ISA paths to measure, e.g. scalar,avx2,avx512 (default: every one this CPU has)");
  p.flag("--quick", &o.quick, "small sizes and few repetitions (seconds, for tests; figures are rough)");
  p.flag("--json", &o.json, "print one JSON object instead of the table");
  p.option("--svg", &o.svg_path, "FILE", "also draw the roofline with every point as an SVG file");
  if (!p.parse(args)) return std::nullopt;
  o.isas = isa_list.empty() ? supported_isas() : parse_isa_list(isa_list);
  if (o.svg_path && o.svg_path->empty()) throw UsageError("--svg: empty file name");
  return o;
}

// Progress lines on stderr; none under --json, whose object is the whole output.
struct ProgressLog {
  bool quiet;
  void operator()(const std::string& line) const {
    if (!quiet) std::fprintf(stderr, "[roofline] %s\n", line.c_str());
  }
};

// The roof: read bandwidth and each ISA path's peak rates.
struct MachineBounds {
  double bandwidth = 0;  // bytes/s
  std::vector<MachineFigures> isas;

  // The naive loop is measured against the best roof this machine has (that is the gap it shows).
  const MachineFigures& best() const {
    return *std::max_element(isas.begin(), isas.end(), [](const auto& a, const auto& b) {
      return static_cast<int>(a.isa) < static_cast<int>(b.isa);  // later paths are the faster ones
    });
  }
  const MachineFigures& of(const std::string& isa) const {
    return *std::find_if(isas.begin(), isas.end(), [&](const auto& f) { return isa_name(f.isa) == isa; });
  }
};

// One probe round. The bounds are best-of measurements; rounds run once before and once after
// the kernels and keep the better figure, so one busy moment on a shared machine does not lower
// the roof under points timed in a quieter one.
void probe_bounds(ThreadPool& pool, const Sweep& sweep, int64_t threads, const ProgressLog& log, MachineBounds& b) {
  log("measuring read bandwidth and peak multiply-add rates on " + std::to_string(threads) + " threads");
  b.bandwidth = std::max(b.bandwidth, measure_read_bandwidth(pool, sweep.probe_bytes, sweep.probe_reps));
  for (MachineFigures& m : b.isas) {
    m.peak_f32 = std::max(m.peak_f32, measure_peak_flops(pool, m.isa, sweep.peak_reps));
    m.peak_int8 = std::max(m.peak_int8, measure_peak_int8_ops(pool, m.isa, sweep.peak_reps));
  }
}

// A matrix to time and the batch sizes to time it at.
struct Shape {
  int64_t n_out, n_in;
  std::vector<int64_t> tokens;
};

// The prefill matrix (also a decode point) first, then the decode-only ones.
std::vector<Shape> matrix_shapes(const Sweep& sweep) {
  std::vector<Shape> shapes = {{sweep.prefill_n_out, sweep.prefill_n_in, {1}}};
  for (int64_t n : sweep.prefill_tokens) shapes[0].tokens.push_back(n);
  for (auto [n_out, n_in] : sweep.decode) {
    if (n_out == sweep.prefill_n_out && n_in == sweep.prefill_n_in) continue;
    shapes.push_back({n_out, n_in, {1}});
  }
  return shapes;
}

// Times every kernel point: per matrix and weight type, the naive loop (f32 weights, prefill
// matrix only) and the tuned kernels on each ISA path with each activation mode the type has.
// Inputs and outputs are sized once for the largest point and shared by every call.
class KernelTimer {
 public:
  KernelTimer(const Sweep& sweep, int64_t threads, ThreadPool& pool, const ProgressLog& log)
      : sweep_(sweep), pool_(pool), log_(log) {
    const int64_t max_tokens = std::max(*std::max_element(sweep.prefill_tokens.begin(), sweep.prefill_tokens.end()),
                                        *std::max_element(sweep.naive_tokens.begin(), sweep.naive_tokens.end()));
    const int64_t max_in =
        std::max(sweep.prefill_n_in, std::max_element(sweep.decode.begin(), sweep.decode.end(), [](auto a, auto b) {
                                      return a.second < b.second;
                                    })->second);
    const int64_t max_out =
        std::max(sweep.prefill_n_out, std::max_element(sweep.decode.begin(), sweep.decode.end())->first);
    x_ = lcg_floats(max_tokens * max_in, 7);
    y_.resize(static_cast<size_t>(max_tokens * max_out));
    scratch_.resize(static_cast<size_t>(matmul_scratch_floats(max_in, threads)));
    act_scratch_.resize(static_cast<size_t>(act_scratch_blocks(max_tokens, max_in)));
  }

  std::vector<Point> measure_all(const std::vector<MachineFigures>& isas) {
    for (const Shape& shape : matrix_shapes(sweep_)) {
      const std::vector<float> source = lcg_floats(shape.n_out * shape.n_in, static_cast<uint32_t>(shape.n_out));
      for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0}) {
        ColdWeights cold(type, shape.n_out, shape.n_in, sweep_.cold_bytes, source);
        if (type == TensorType::F32 && shape.n_out == sweep_.prefill_n_out && shape.n_in == sweep_.prefill_n_in) {
          measure_naive(shape, cold);
        }
        for (const MachineFigures& m : isas) measure_tuned(shape, type, cold, m.isa);
      }
    }
    return std::move(points_);
  }

 private:
  void measure_naive(const Shape& shape, ColdWeights& cold) {
    for (int64_t n : sweep_.naive_tokens) {
      auto [sec, reps] = time_calls(
          [&] {
            const TensorView& w = cold.next();
            naive_matmul(reinterpret_cast<const float*>(w.data.data()), x_.data(), y_.data(), n, shape.n_out,
                         shape.n_in);
          },
          sweep_.reps, sweep_.min_rep_s);
      Point pt;
      pt.isa = "naive", pt.kernel = "naive", pt.activations = "f32", pt.n_tokens = n;
      pt.peak_kind = "f32";
      record(pt, shape, TensorType::F32, cold, sec, reps);
    }
  }

  void measure_tuned(const Shape& shape, TensorType type, ColdWeights& cold, Isa isa) {
    for (Activations act : {Activations::Q8, Activations::F32}) {
      if (act == Activations::Q8 && !has_int8_dot(type)) continue;
      for (int64_t n : shape.tokens) {
        const std::span<const float> xs(x_.data(), static_cast<size_t>(n * shape.n_in));
        const std::span<float> ys(y_.data(), static_cast<size_t>(n * shape.n_out));
        auto [sec, reps] = time_calls([&] { matmul(cold.next(), xs, ys, n, scratch_, &pool_, isa, act, act_scratch_); },
                                      sweep_.reps, sweep_.min_rep_s);
        Point pt;
        pt.isa = std::string(isa_name(isa)), pt.kernel = "tuned";
        pt.activations = act == Activations::Q8 ? "q8" : "f32";
        pt.n_tokens = n;
        // Integer dot products meet the int8 ceiling; the scalar path has no int8 probe, so
        // its integer kernel is held to the scalar f32 rate (one multiply-add per element).
        const bool int8 = act == Activations::Q8 && has_int8_dot(type) && isa != Isa::Scalar;
        pt.peak_kind = int8 ? "int8" : "f32";
        record(pt, shape, type, cold, sec, reps);
      }
    }
  }

  // Completes a timed point (its matrix, flops and bytes moved), keeps it and logs it.
  void record(Point pt, const Shape& shape, TensorType type, const ColdWeights& cold, double seconds, int reps) {
    pt.n_out = shape.n_out, pt.n_in = shape.n_in, pt.weights = type;
    pt.seconds = seconds, pt.reps = reps;
    pt.flops = 2.0 * static_cast<double>(pt.n_tokens * shape.n_out * shape.n_in);
    pt.bytes =
        static_cast<double>(cold.matrix_bytes()) + 4.0 * static_cast<double>(pt.n_tokens * (shape.n_in + shape.n_out));
    points_.push_back(pt);
    char line[160];
    std::snprintf(line, sizeof line, "%s %s %lldx%lldx%lld: %.2f GFLOP/s", pt.isa.c_str(), pt.series().c_str(),
                  static_cast<long long>(pt.n_tokens), static_cast<long long>(pt.n_out),
                  static_cast<long long>(pt.n_in), pt.gflops());
    log_(line);
  }

  const Sweep& sweep_;
  ThreadPool& pool_;
  const ProgressLog& log_;
  std::vector<float> x_, y_, scratch_;
  std::vector<Q8Block> act_scratch_;
  std::vector<Point> points_;
};

// Gives every point the final bandwidth and the ceiling of its arithmetic on its ISA path.
void attach_roofs(MachineBounds& b, std::vector<Point>& points) {
  for (MachineFigures& m : b.isas) m.bandwidth = b.bandwidth;
  for (Point& pt : points) {
    pt.bandwidth = b.bandwidth;
    const MachineFigures& m = pt.kernel == "naive" ? b.best() : b.of(pt.isa);
    pt.peak = pt.peak_kind == "int8" ? m.peak_int8 : m.peak_f32;
  }
}

// Sentences: each ISA's ridges, then decode and prefill for the arithmetic the model uses by
// default (q8_0·q8) and for plain f32 on that ISA, and last the naive loop.
std::vector<std::string> summary_lines(const MachineBounds& b, const std::vector<Point>& points, const Sweep& sweep,
                                       int64_t threads) {
  auto find = [&](const std::string& isa, TensorType w, const std::string& act, int64_t n) -> const Point* {
    for (const Point& pt : points) {
      if (pt.isa == isa && pt.weights == w && pt.activations == act && pt.n_tokens == n &&
          pt.n_out == sweep.prefill_n_out && pt.n_in == sweep.prefill_n_in) {
        return &pt;
      }
    }
    return nullptr;
  };
  std::vector<std::string> summary;
  const int64_t max_prefill = *std::max_element(sweep.prefill_tokens.begin(), sweep.prefill_tokens.end());
  for (const MachineFigures& m : b.isas) {
    const std::string isa(isa_name(m.isa));
    std::string ridges = isa + ": ridge " +
                         fmt("%.1f flop/B for f32 FMA (%.1f GFLOP/s / %.1f GB/s)", m.peak_f32 / b.bandwidth,
                             m.peak_f32 / 1e9, b.bandwidth / 1e9);
    if (m.peak_int8 > 0) {
      ridges += fmt(", %.1f flop/B for int8 (%.1f GOP/s)", m.peak_int8 / b.bandwidth, m.peak_int8 / 1e9);
    }
    summary.push_back(ridges);
    for (auto [w, act] : {std::pair{TensorType::Q8_0, "q8"}, std::pair{TensorType::F32, "f32"}}) {
      if (const Point* pt = find(isa, w, act, 1)) summary.push_back("  " + describe(*pt, "decode"));
      if (const Point* pt = find(isa, w, act, max_prefill)) summary.push_back("  " + describe(*pt, "prefill"));
    }
  }
  const int64_t max_naive = *std::max_element(sweep.naive_tokens.begin(), sweep.naive_tokens.end());
  if (const Point* pt = find("naive", TensorType::F32, "f32", max_naive)) {
    summary.push_back("naive triple loop, 1 thread, against the " + std::string(isa_name(b.best().isa)) + " roof on " +
                      std::to_string(threads) + " thread(s): " + describe(*pt, "prefill"));
  }
  return summary;
}

void write_svg(const RooflineOptions& o, const MachineBounds& b, const std::vector<Point>& points,
               const ProgressLog& log) {
  RooflineChart chart;
  chart.title = "peregrine roofline: " + std::to_string(o.threads) + " threads" + (o.quick ? " (--quick)" : "");
  chart.bandwidth_gbps = b.bandwidth / 1e9;
  for (const MachineFigures& m : b.isas) {
    chart.ceilings.push_back({std::string(isa_name(m.isa)) + " f32 FMA", m.peak_f32 / 1e9});
    if (m.peak_int8 > 0) chart.ceilings.push_back({std::string(isa_name(m.isa)) + " int8", m.peak_int8 / 1e9});
  }
  const std::string best_isa(isa_name(b.best().isa));
  for (const Point& pt : points) {
    chart.points.push_back({pt.label(), pt.series(), pt.isa != best_isa, pt.intensity(), pt.gflops()});
  }
  std::ofstream out(*o.svg_path, std::ios::binary);
  out << roofline_svg(chart);
  out.close();
  if (!out) throw std::runtime_error("--svg: cannot write '" + *o.svg_path + "'");
  log("wrote " + *o.svg_path);
}

nlohmann::json point_json(const Point& pt) {
  return {{"isa", pt.isa},
          {"kernel", pt.kernel},
          {"weights", tensor_type_name(pt.weights)},
          {"activations", pt.activations},
          {"phase", pt.phase()},
          {"n_out", pt.n_out},
          {"n_in", pt.n_in},
          {"n_tokens", pt.n_tokens},
          {"seconds", pt.seconds},
          {"reps", pt.reps},
          {"flops", pt.flops},
          {"bytes", pt.bytes},
          {"gflops", pt.gflops()},
          {"gbps", pt.gbps()},
          {"intensity", pt.intensity()},
          {"peak_kind", pt.peak_kind},
          {"roof_gflops", pt.roof() / 1e9},
          {"bound", pt.memory_bound() ? "memory" : "compute"},
          {"pct_of_roof", pt.pct_of_roof()}};
}

void print_json(const RooflineOptions& o, const MachineBounds& b, const std::vector<Point>& points,
                const std::vector<std::string>& summary) {
  nlohmann::json out;
  out["threads"] = o.threads;
  out["quick"] = o.quick;
  out["bandwidth_gbps"] = b.bandwidth / 1e9;
  out["machine"] = nlohmann::json::array();
  for (const MachineFigures& m : b.isas) {
    nlohmann::json j = {{"isa", isa_name(m.isa)},
                        {"bandwidth_gbps", b.bandwidth / 1e9},
                        {"peak_f32_gflops", m.peak_f32 / 1e9},
                        {"peak_int8_gops", m.peak_int8 / 1e9},
                        {"ridge_f32", m.peak_f32 / b.bandwidth}};
    j["ridge_int8"] = m.peak_int8 > 0 ? nlohmann::json(m.peak_int8 / b.bandwidth) : nlohmann::json(nullptr);
    out["machine"].push_back(j);
  }
  out["points"] = nlohmann::json::array();
  for (const Point& pt : points) out["points"].push_back(point_json(pt));
  out["summary"] = summary;
  std::puts(out.dump().c_str());
}

// Two Markdown tables (the machine, then every point) and the summary sentences.
void print_tables(int64_t threads, const MachineBounds& b, const std::vector<Point>& points,
                  const std::vector<std::string>& summary) {
  std::printf("threads %lld, read bandwidth %.1f GB/s\n", static_cast<long long>(threads), b.bandwidth / 1e9);
  std::printf("| isa    | peak f32 GFLOP/s | peak int8 GOP/s | ridge f32 flop/B | ridge int8 flop/B |\n");
  std::printf("|--------|-----------------:|----------------:|-----------------:|------------------:|\n");
  for (const MachineFigures& m : b.isas) {
    std::printf("| %-6s | %16.1f | %15.1f | %16.2f | %17s |\n", std::string(isa_name(m.isa)).c_str(), m.peak_f32 / 1e9,
                m.peak_int8 / 1e9, m.peak_f32 / b.bandwidth,
                m.peak_int8 > 0 ? fmt("%.2f", m.peak_int8 / b.bandwidth).c_str() : "-");
  }
  std::printf(
      "\n| isa    | kernel        | phase   | tokens x out x in | GFLOP/s |  GB/s | MB moved | flop/B | roof GFLOP/s "
      "(bound) | %% of roof |\n");
  std::printf(
      "|--------|---------------|---------|-------------------|--------:|------:|---------:|-------:|-----------------"
      "----:|----------:|\n");
  for (const Point& pt : points) {
    const std::string dims =
        std::to_string(pt.n_tokens) + "x" + std::to_string(pt.n_out) + "x" + std::to_string(pt.n_in);
    std::printf("| %-6s | %-13s | %-7s | %-17s | %7.1f | %5.1f | %8.1f | %6.2f | %11.1f (%-7s) | %8.1f%% |\n",
                pt.isa.c_str(), pt.series().c_str(), pt.phase().c_str(), dims.c_str(), pt.gflops(), pt.gbps(),
                pt.bytes / 1e6, pt.intensity(), pt.roof() / 1e9, pt.memory_bound() ? "memory" : pt.peak_kind.c_str(),
                pt.pct_of_roof());
  }
  std::printf("\n");
  for (const std::string& line : summary) std::printf("%s\n", line.c_str());
}

}  // namespace

int roofline_command(const Args& args) {
  const std::optional<RooflineOptions> o = parse_roofline_args(args);
  if (!o) return 0;
  const Sweep sweep = o->quick ? quick_sweep() : full_sweep();
  const ProgressLog log{o->json};

  ThreadPool pool(static_cast<int>(o->threads));
  MachineBounds bounds;
  for (Isa isa : o->isas) bounds.isas.push_back({isa});
  probe_bounds(pool, sweep, o->threads, log, bounds);
  std::vector<Point> points = KernelTimer(sweep, o->threads, pool, log).measure_all(bounds.isas);
  probe_bounds(pool, sweep, o->threads, log, bounds);
  attach_roofs(bounds, points);

  const std::vector<std::string> summary = summary_lines(bounds, points, sweep, o->threads);
  if (o->svg_path) write_svg(*o, bounds, points, log);
  if (o->json) {
    print_json(*o, bounds, points, summary);
  } else {
    print_tables(o->threads, bounds, points, summary);
  }
  return 0;
}

}  // namespace peregrine::cli
