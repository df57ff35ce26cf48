// What one forward pass of K rows of a decoding sequence costs, and where the time goes: the
// verification pass of speculative decoding (K = proposals + 1) against a one-row decode step.
// The cache holds `--ctx` positions of one sequence; each timed pass appends K rows after them,
// every row wanting logits (as verification does), and is rolled back before the next. Part
// times come from a context that wraps the CPU context and times each operation the model asks
// for (matmuls by weight, attention, norms, ...); with `--no-split` the passes run on the CPU
// context directly (the timing wrapper costs a clock read per operation).
// Run: build/bench/bench_pass [MODEL] [--rows 1,2,3,5,9] [--ctx 100] [--passes 2000] [-t 2] [--no-split]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu_context.h"
#include "format/model_file.h"
#include "model/model.h"

using namespace peregrine;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds of the whole process (every thread, spinning included): on a machine shared with
// other work it does not count the time the threads waited for a core.
double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The clock the parts are timed with: wall time, or (--cpu-clock) the process's CPU time.
bool g_cpu_clock = false;
double part_clock() { return g_cpu_clock ? cpu_s() : now_s(); }

// Forwards every operation to a CpuContext and adds its wall time to a named bucket.
class TimedContext final : public ExecutionContext {
 public:
  explicit TimedContext(std::shared_ptr<CpuContext> inner) : in_(std::move(inner)) {}
  std::map<std::string, double> seconds;

  std::string describe() const override { return in_->describe(); }
  int n_threads() const override { return in_->n_threads(); }
  Buffer allocate(size_t bytes) override { return in_->allocate(bytes); }
  void embed(const TensorView& t, std::span<const TokenId> tok, std::span<float> x) override {
    timed("embed", [&] { in_->embed(t, tok, x); });
  }
  void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n) override {
    timed(role(w.name), [&] { in_->matmul(w, x, y, n); });
  }
  void matmuls(std::span<const MatmulOutput> outs, std::span<const float> x, int64_t n) override {
    timed(role(outs[0].w->name) + "+", [&] { in_->matmuls(outs, x, n); });
  }
  void rmsnorm(std::span<const float> x, std::span<const float> w, float eps, std::span<float> out,
               int64_t n) override {
    timed("rmsnorm", [&] { in_->rmsnorm(x, w, eps, out, n); });
  }
  void add_bias(std::span<float> x, std::span<const float> b, int64_t n) override {
    timed("add_bias", [&] { in_->add_bias(x, b, n); });
  }
  void add(std::span<float> x, std::span<const float> y) override {
    timed("add", [&] { in_->add(x, y); });
  }
  void swiglu(std::span<float> g, std::span<const float> u) override {
    timed("swiglu", [&] { in_->swiglu(g, u); });
  }
  void silu(std::span<float> x) override {
    timed("silu", [&] { in_->silu(x); });
  }
  void copy_to_host(std::span<const float> src, std::span<float> dst) override {
    timed("copy", [&] { in_->copy_to_host(src, dst); });
  }
  void copy_from_host(std::span<const float> src, std::span<float> dst) override {
    timed("copy", [&] { in_->copy_from_host(src, dst); });
  }
  void geglu(std::span<float> g, std::span<const float> u) override {
    timed("geglu", [&] { in_->geglu(g, u); });
  }
  void scale(std::span<float> x, float s) override {
    timed("scale", [&] { in_->scale(x, s); });
  }
  void softcap(std::span<float> x, float c) override {
    timed("softcap", [&] { in_->softcap(x, c); });
  }
  void rope_angles(std::span<const int32_t> p, const RopeParams& r, std::span<float> cs) override {
    timed("rope_angles", [&] { in_->rope_angles(p, r, cs); });
  }
  void rope(std::span<float> x, int64_t nh, int64_t hd, const RopeParams& p, std::span<const float> cs,
            int64_t n) override {
    timed("rope", [&] { in_->rope(x, nh, hd, p, cs, n); });
  }
  // The KV storage is the inner context's: it allocates it and alone reads it.
  std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) override { return in_->allocate_kv(spec); }
  void write_kv(KvStorage& kv, int64_t l, const KvBatchLayout& lay, std::span<const float> k,
                std::span<const float> v) override {
    timed("write_kv", [&] { in_->write_kv(kv, l, lay, k, v); });
  }
  void attention(const KvStorage& kv, int64_t l, const KvBatchLayout& lay, int64_t nh, const AttentionParams& p,
                 std::span<const float> q, std::span<float> out) override {
    timed("attention", [&] { in_->attention(kv, l, lay, nh, p, q, out); });
  }
  void copy_kv_blocks(KvStorage& kv, std::span<const BlockCopy> copies) override {
    timed("copy_kv_blocks", [&] { in_->copy_kv_blocks(kv, copies); });
  }
  void export_kv(const KvStorage& kv, BlockId b, int64_t h0, int64_t h1, std::span<std::byte> out) override {
    in_->export_kv(kv, b, h0, h1, out);
  }
  void import_kv(KvStorage& kv, BlockId b, int64_t h0, int64_t h1, std::span<const std::byte> in) override {
    in_->import_kv(kv, b, h0, h1, in);
  }
  void read_kv_row(const KvStorage& kv, int64_t l, int64_t row, std::span<float> k, std::span<float> v) override {
    in_->read_kv_row(kv, l, row, k, v);
  }
  void route_experts(std::span<const float> lg, const MoeRouting& r, std::span<int32_t> e,
                     std::span<float> w) override {
    timed("route_experts", [&] { in_->route_experts(lg, r, e, w); });
  }
  void gather_rows(std::span<const float> x, std::span<const int32_t> r, std::span<float> out, int64_t width) override {
    timed("gather_rows", [&] { in_->gather_rows(x, r, out, width); });
  }
  void matmul_experts(const TensorView& w, std::span<const int64_t> o, std::span<const float> x,
                      std::span<float> y) override {
    timed("matmul_experts", [&] { in_->matmul_experts(w, o, x, y); });
  }
  void combine_rows(std::span<const float> y, std::span<const int32_t> r, std::span<const float> s,
                    std::span<float> out, int64_t width) override {
    timed("combine_rows", [&] { in_->combine_rows(y, r, s, out, width); });
  }
  void sigmoid_gate(std::span<float> x, std::span<const float> g, int64_t n) override {
    timed("sigmoid_gate", [&] { in_->sigmoid_gate(x, g, n); });
  }

 private:
  // "blk.2.attn_q.weight" -> "attn_q"
  static std::string role(const std::string& name) {
    std::string s = name;
    if (s.rfind("blk.", 0) == 0) s = s.substr(s.find('.', 4) + 1);
    if (const size_t dot = s.rfind(".weight"); dot != std::string::npos) s.resize(dot);
    return s;
  }
  template <class F>
  void timed(const std::string& what, F&& f) {
    const double t0 = part_clock();
    f();
    seconds[what] += part_clock() - t0;
  }
  std::shared_ptr<CpuContext> in_;
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

struct Options {
  std::string model = PEREGRINE_SOURCE_DIR "/models/demo-target.gguf";
  std::vector<int> rows = {1, 2, 3, 5, 9};
  int ctx = 100, passes = 2000, threads = 2;
  bool split = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--rows" && more) {
      o.rows = parse_list(argv[++i]);
    } else if (a == "--ctx" && more) {
      o.ctx = std::atoi(argv[++i]);
    } else if (a == "--passes" && more) {
      o.passes = std::atoi(argv[++i]);
    } else if (a == "-t" && more) {
      o.threads = std::atoi(argv[++i]);
    } else if (a == "--cpu-clock") {
      g_cpu_clock = true;
    } else if (a == "--no-split") {
      o.split = false;
    } else if (a[0] != '-') {
      o.model = a;
    } else {
      std::fprintf(
          stderr,
          "usage: bench_pass [MODEL] [--rows 1,2,5] [--ctx N] [--passes N] [-t N] [--no-split] [--cpu-clock]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  auto cpu = std::make_shared<CpuContext>(o.threads);
  auto timed = std::make_shared<TimedContext>(cpu);
  const std::shared_ptr<ExecutionContext> ctx = o.split ? std::shared_ptr<ExecutionContext>(timed) : cpu;
  Model m(open_model_file(o.model), ctx);
  const int max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  if (o.ctx < 1 || o.ctx + max_rows > m.config().context_length) {
    std::fprintf(stderr, "bench_pass: --ctx plus the rows must fit the context (%lld)\n",
                 static_cast<long long>(m.config().context_length));
    return 2;
  }
  KvCache kv = m.make_kv_cache(KvType::F16, (o.ctx + max_rows) / 16 + 2, 16);
  kv.pool().reserve(0, o.ctx + max_rows);
  std::vector<float> logits;
  Batch prompt;
  for (int p = 0; p < o.ctx; ++p) prompt.add(1 + (p * 7919) % (static_cast<int>(m.config().n_vocab) - 1), p, 0, false);
  m.forward(prompt, kv, logits);
  std::printf("%s, %s, %d cached positions\n", o.model.c_str(), ctx->describe().c_str(), o.ctx);
  double one_row = 0;
  for (const int k : o.rows) {
    Batch pass;
    for (int i = 0; i < k; ++i) pass.add(3 + i, o.ctx + i, 0, true);
    for (int i = 0; i < 50; ++i) {  // warm
      m.forward(pass, kv, logits);  // rewrites positions ctx.. each time: the cache holds ctx before
    }
    timed->seconds.clear();
    std::vector<double> times;
    const double c0 = cpu_s(), w0 = part_clock();
    for (int i = 0; i < o.passes; ++i) {
      const double t0 = now_s();
      m.forward(pass, kv, logits);
      times.push_back(now_s() - t0);
    }
    const double total = part_clock() - w0, cpu = (cpu_s() - c0) / o.passes;
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    if (k == o.rows.front()) one_row = median;
    std::printf("rows %2d: median %.4f ms (%.2fx the first), process CPU %.4f ms per pass\n", k, median * 1e3,
                median / one_row, cpu * 1e3);
    if (!o.split) continue;
    double parts = 0;
    for (const auto& [name, s] : timed->seconds) parts += s;
    std::vector<std::pair<double, std::string>> by_time;
    for (const auto& [name, s] : timed->seconds) by_time.emplace_back(s, name);
    std::sort(by_time.rbegin(), by_time.rend());
    for (const auto& [s, name] : by_time) {
      std::printf("    %-14s %.4f ms  %4.1f %%\n", name.c_str(), s / o.passes * 1e3, 100 * s / total);
    }
    std::printf("    %-14s %.4f ms  %4.1f %%\n", "(outside ops)", (total - parts) / o.passes * 1e3,
                100 * (total - parts) / total);
  }
  return 0;
}
