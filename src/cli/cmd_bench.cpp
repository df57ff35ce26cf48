// `peregrine bench`: llama-bench-style throughput of one model on this machine, each figure next
// to the bound this machine allows (memory bandwidth for decode, peak multiply-add for prefill).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "kernels/machine_probe.h"
#include "kernels/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

struct Stats {
  double mean = 0, sd = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int64_t> parse_batch_list(const std::string& text) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    size_t used = 0;
    int64_t b = 0;
    try {
      b = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || b < 1 || b > 1024) {
      throw UsageError("-b: '" + item + "' is not a batch size in [1, 1024] (expected a list like 1,4,16)");
    }
    out.push_back(b);
    start = comma + 1;
  }
  return out;
}

// Bytes of weights one decode step reads: every matrix the forward pass multiplies by, once
// (the embedding contributes one row per token, which is negligible), plus the small vectors.
int64_t weight_bytes_per_token(const Model& m) {
  int64_t bytes = 0;
  for (const TensorView& t : m.file().tensors) {
    if (t.name == "token_embd.weight" && !m.config().tied_output) continue;
    bytes += static_cast<int64_t>(t.data.size());
  }
  return bytes;
}

// Flops per token (2 per multiply-add) of the weight matmuls, split by the arithmetic that runs
// them: 8-bit integer dot products (Q8_0/Q4_0 weights with Q8 activations) or f32 FMA. The 2·params
// rule; attention is not counted (small at these prompt lengths).
struct MatmulFlops {
  double int8 = 0, f32 = 0;
};
MatmulFlops matmul_flops_per_token(const Model& m) {
  MatmulFlops f;
  auto add = [&](const TensorView& t, double macs) {
    (m.activations() == Activations::Q8 && has_int8_dot(t.type) ? f.int8 : f.f32) += 2 * macs;
  };
  for (const TensorView& t : m.file().tensors) {
    if (t.shape.size() != 2 || t.name == "token_embd.weight") continue;
    add(t, static_cast<double>(t.n_elements()));
  }
  if (m.config().tied_output) {
    if (const TensorView* e = m.file().find("token_embd.weight")) add(*e, static_cast<double>(e->n_elements()));
  }
  return f;
}

std::vector<TokenId> random_tokens(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(0, n_vocab - 1);
  std::vector<TokenId> out(static_cast<size_t>(n));
  for (auto& t : out) t = static_cast<TokenId>(d(rng));
  return out;
}

// Prefill of n_prompt tokens as one batch into a fresh cache; returns tokens/s.
double run_pp(Model& m, KvType kv_type, int64_t n_prompt, uint32_t seed) {
  const int64_t bs = 16;
  KvCache kv(m.config().kv_shape(), kv_type, (n_prompt + bs - 1) / bs + 1, static_cast<int32_t>(bs));
  if (!kv.reserve(0, n_prompt)) throw UsageError("bench: KV cache too small");
  const auto toks = random_tokens(n_prompt, m.config().n_vocab, seed);
  Batch batch;
  for (int64_t i = 0; i < n_prompt; ++i) batch.add(toks[static_cast<size_t>(i)], static_cast<int32_t>(i), 0, i + 1 == n_prompt);
  std::vector<float> logits;
  const double t0 = now_s();
  m.forward(batch, kv, logits);
  return static_cast<double>(n_prompt) / (now_s() - t0);
}

// n_steps decode steps of n_seqs sequences at once (each step one token per sequence, starting
// from an empty context); returns generated tokens/s over all sequences.
double run_tg(Model& m, KvType kv_type, int64_t n_seqs, int64_t n_steps, uint32_t seed) {
  const int64_t bs = 16;
  KvCache kv(m.config().kv_shape(), kv_type, n_seqs * ((n_steps + bs - 1) / bs + 1), static_cast<int32_t>(bs));
  for (int64_t s = 0; s < n_seqs; ++s) {
    if (!kv.reserve(static_cast<SeqId>(s), n_steps)) throw UsageError("bench: KV cache too small");
  }
  const auto toks = random_tokens(n_steps * n_seqs, m.config().n_vocab, seed);
  Batch batch;
  std::vector<float> logits;
  const double t0 = now_s();
  for (int64_t step = 0; step < n_steps; ++step) {
    batch.clear();
    for (int64_t s = 0; s < n_seqs; ++s) {
      batch.add(toks[static_cast<size_t>(step * n_seqs + s)], static_cast<int32_t>(step), static_cast<SeqId>(s), true);
    }
    m.forward(batch, kv, logits);
  }
  return static_cast<double>(n_steps * n_seqs) / (now_s() - t0);
}

}  // namespace

int bench_command(const Args& args) {
  std::optional<std::string> model;
  int64_t n_prompt = 512, n_gen = 128, reps = 5, batched_steps = 16;
  int64_t threads = physical_core_count();
  std::string batches = "1,4,16";
  bool json = false;
  ArgParser p("bench", "Measure prompt processing (pp) and text generation (tg) tokens/s, mean ± sd over\n"
                       "repetitions, and decode throughput with B sequences at once; each next to this\n"
                       "machine's bound (measured read bandwidth for tg, measured peak multiply-add for pp).");
  p.positional("MODEL", &model, "model file (GGUF)");
  p.option("-p,--n-prompt", &n_prompt, "N", "prompt tokens per pp run; 0 = skip pp", 0, 1 << 16);
  p.option("-n,--n-gen", &n_gen, "N", "generated tokens per tg run; 0 = skip tg", 0, 1 << 16);
  p.option("-t,--threads", &threads, "N", "threads (default: physical cores)", 1, 1024);
  p.option("-r,--repetitions", &reps, "N", "repetitions of each test", 1, 1000);
  p.option("-b,--batch", &batches, "LIST", "parallel sequences for batched decode, e.g. 1,4,16; empty = skip");
  p.option("--batched-steps", &batched_steps, "N", "decode steps per batched run", 1, 1 << 16);
  std::string activations = "q8";
  p.option("--activations", &activations, "q8|f32",
           "how activations meet Q8_0/Q4_0 weights: 8-bit integer dot products or exact f32");
  p.flag("--json", &json, "print one JSON object instead of the table");
  if (!p.parse(args)) return 0;
  if (activations != "q8" && activations != "f32") {
    throw UsageError("--activations '" + activations + "': expected q8 or f32");
  }
  const Activations act = activations == "q8" ? Activations::Q8 : Activations::F32;
  const std::vector<int64_t> batch_sizes = batches.empty() ? std::vector<int64_t>{} : parse_batch_list(batches);

  Model m(open_model_arg(model, std::nullopt), static_cast<int>(threads), act);
  const KvType kv_type = KvType::F16;
  const int64_t model_bytes = [&] {
    int64_t b = 0;
    for (const TensorView& t : m.file().tensors) b += static_cast<int64_t>(t.data.size());
    return b;
  }();
  const int64_t read_bytes = weight_bytes_per_token(m);
  const MatmulFlops flops = matmul_flops_per_token(m);

  ThreadPool probe_pool(static_cast<int>(threads));
  const double bandwidth = measure_read_bandwidth(probe_pool);
  const double peak_flops = measure_peak_flops(probe_pool, m.isa());
  const double peak_int8 = flops.int8 > 0 ? measure_peak_int8_ops(probe_pool, m.isa()) : 0;
  const double tg_bound = bandwidth / static_cast<double>(read_bytes);
  // Each matmul at its own arithmetic's roof: seconds per token add up.
  const double pp_bound = 1.0 / (flops.f32 / peak_flops + (flops.int8 > 0 ? flops.int8 / peak_int8 : 0.0));
  if (!json) {
    std::fprintf(stderr, "[bench] %s: %.2f GB of weights (%.2f GB read per token), isa %s, %lld threads\n",
                 m.file().path.c_str(), model_bytes / 1e9, read_bytes / 1e9, std::string(isa_name(m.isa())).c_str(),
                 static_cast<long long>(threads));
    std::fprintf(stderr, "[bench] measured read bandwidth %.1f GB/s -> tg bound %.1f tok/s\n", bandwidth / 1e9, tg_bound);
    std::fprintf(stderr, "[bench] peak f32 %.1f GFLOP/s, int8 %.1f GOP/s; %.2f GFLOP f32 + %.2f GOP int8 per token -> pp bound %.1f tok/s\n",
                 peak_flops / 1e9, peak_int8 / 1e9, flops.f32 / 1e9, flops.int8 / 1e9, pp_bound);
  }

  // Warm-up: maps the weights in and sizes the scratch buffers, outside the timings.
  run_tg(m, kv_type, 1, 2, 1);

  nlohmann::json out;
  out["model"] = m.file().path;
  out["isa"] = isa_name(m.isa());
  out["threads"] = threads;
  out["model_bytes"] = model_bytes;
  out["bytes_read_per_token"] = read_bytes;
  out["bandwidth_gbps"] = bandwidth / 1e9;
  out["peak_gflops"] = peak_flops / 1e9;
  out["peak_int8_gops"] = peak_int8 / 1e9;
  out["activations"] = activations;
  auto row = [&](const char* test, const Stats& s, double bound) {
    if (!json) {
      std::printf("| %-8s | %10.2f ± %-8.2f tok/s | bound %10.2f tok/s | %5.1f %% of bound |\n", test, s.mean, s.sd,
                  bound, 100.0 * s.mean / bound);
      std::fflush(stdout);
    }
  };
  if (n_prompt > 0) {
    std::vector<double> v;
    for (int64_t r = 0; r < reps; ++r) v.push_back(run_pp(m, kv_type, n_prompt, static_cast<uint32_t>(r + 1)));
    const Stats s = stats(v);
    row(("pp" + std::to_string(n_prompt)).c_str(), s, pp_bound);
    out["pp"] = {{"tokens", n_prompt}, {"tps_mean", s.mean}, {"tps_sd", s.sd}, {"bound_tps", pp_bound},
                 {"pct_of_bound", 100.0 * s.mean / pp_bound}};
  }
  if (n_gen > 0) {
    std::vector<double> v;
    for (int64_t r = 0; r < reps; ++r) v.push_back(run_tg(m, kv_type, 1, n_gen, static_cast<uint32_t>(r + 1)));
    const Stats s = stats(v);
    row(("tg" + std::to_string(n_gen)).c_str(), s, tg_bound);
    out["tg"] = {{"tokens", n_gen}, {"tps_mean", s.mean}, {"tps_sd", s.sd}, {"bound_tps", tg_bound},
                 {"pct_of_bound", 100.0 * s.mean / tg_bound}};
  }
  nlohmann::json batched = nlohmann::json::array();
  for (int64_t b : batch_sizes) {
    std::vector<double> v;
    for (int64_t r = 0; r < reps; ++r) v.push_back(run_tg(m, kv_type, b, batched_steps, static_cast<uint32_t>(r + 1)));
    const Stats s = stats(v);
    // B sequences share each weight read, so the bandwidth bound scales with B until compute
    // (pp_bound) takes over.
    const double bound = std::min(tg_bound * static_cast<double>(b), pp_bound);
    row(("B=" + std::to_string(b)).c_str(), s, bound);
    batched.push_back({{"batch", b}, {"tps_mean", s.mean}, {"tps_sd", s.sd}, {"bound_tps", bound}});
  }
  out["batched"] = batched;
  if (json) std::puts(out.dump().c_str());
  return 0;
}

}  // namespace peregrine::cli
