// `peregrine bench`: llama-bench-style throughput of one model on this machine, each figure next
// to the bound this machine allows (memory bandwidth for decode, peak multiply-add for prefill).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/commands.h"
#include "cli/dist_flags.h"
#include "cli/model_host.h"
#include "cli/model_loading.h"
#include "cli/spec_flags.h"
#include "engine/engine_core.h"
#include "kv/kv_type.h"
#include "model/weight_census.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

struct Stats {
  double mean = 0, sd = 0, best = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  for (double x : v) s.best = std::max(s.best, x);
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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
// (the embedding contributes one row per token, which is negligible), plus the small vectors;
// of a mixture of experts' stacked experts, only the `experts` per layer the step runs.
double weight_bytes_per_step(const Model& m, double experts) {
  const WeightCensus census = weight_census(m.file(), m.config());
  double bytes = 0;
  for (const TensorView& t : m.file().tensors) {
    if (t.name == "token_embd.weight" && !m.config().tied_output) continue;
    bytes += static_cast<double>(t.data.size()) * (is_expert_tensor(t) ? census.expert_fraction(experts) : 1.0);
  }
  return bytes;
}

// Flops per token (2 per multiply-add) of the weight matmuls, split by the arithmetic that runs
// them: 8-bit integer dot products (has_int8_dot weights: every quantized type, with Q8
// activations) or f32 FMA. The 2·params rule, with k of E experts per token; attention is not
// counted (small at these prompt lengths).
struct MatmulFlops {
  double int8 = 0, f32 = 0, bf16 = 0;
};
MatmulFlops matmul_flops_per_token(const Model& m, Activations act) {
  MatmulFlops f;
  // F16/BF16 weights multiply in bf16 where the context reads F16 as BF16 (AVX512-BF16, Q8).
  const bool bf16 = m.context().matmul_weight_type(TensorType::F16) == TensorType::BF16;
  auto add = [&](const TensorView& t, double macs) {
    const bool sixteen = t.type == TensorType::F16 || t.type == TensorType::BF16;
    (act == Activations::Q8 && has_int8_dot(t.type) ? f.int8 : bf16 && sixteen ? f.bf16 : f.f32) += 2 * macs;
  };
  const WeightCensus census = weight_census(m.file(), m.config());
  for (const TensorView& t : m.file().tensors) {
    if (is_expert_tensor(t)) {
      add(t, static_cast<double>(t.n_elements()) * census.expert_fraction(static_cast<double>(census.n_used)));
      continue;
    }
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

// An engine for one benchmark: `max_seqs` sequences of up to `max_tokens` positions each, the
// whole prompt in one step, no prefix caching (every prompt is new anyway).
EngineConfig bench_engine(KvType kv_type, int64_t max_seqs, int64_t max_tokens) {
  EngineConfig e;
  e.kv_type = kv_type;
  e.prefix_caching = false;
  e.kv_blocks = max_seqs * ((max_tokens + e.block_size - 1) / e.block_size + 1);
  e.scheduler.max_seqs = max_seqs;
  e.scheduler.max_batched_tokens = std::max<int64_t>(max_tokens, max_seqs);
  return e;
}

Request bench_request(std::vector<TokenId> prompt, int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;  // greedy: the cheapest sampler, and no tokenizer means no EOS
  return r;
}

// Prefill of n_prompt tokens as one step into a fresh cache; returns tokens/s.
double run_pp(ModelRunner& m, KvType kv_type, int64_t n_prompt, uint32_t seed) {
  EngineCore core(m, nullptr, bench_engine(kv_type, 1, n_prompt + 1));
  core.add_request(bench_request(random_tokens(n_prompt, m.config().n_vocab, seed), 1));
  const double t0 = now_s();
  core.step();
  return static_cast<double>(n_prompt) / (now_s() - t0);
}

// Speculation's totals over the tg runs of a benchmark.
struct SpecTotals {
  std::shared_ptr<Proposer> proposer;  // null: plain decoding
  int64_t k = 4;
  bool adaptive = true;
  int64_t proposed = 0, accepted = 0, decode_rows = 0, generated = 0;
};

// n_steps tokens for each of n_seqs sequences at once (one token per sequence and step, or more
// with speculation), starting from a one-token prompt, or after a prompt of `depth` + 1 tokens
// whose prefill is not timed (llama-bench's -d: decode where attention reads a long row);
// returns generated tokens/s over all sequences.
double run_tg(ModelRunner& m, KvType kv_type, int64_t n_seqs, int64_t n_steps, uint32_t seed,
              SpecTotals* spec = nullptr, int64_t depth = 0) {
  EngineConfig cfg = bench_engine(kv_type, n_seqs, depth + n_steps + 2);
  if (spec && spec->proposer) {
    cfg.proposer = spec->proposer;
    cfg.spec_tokens = spec->k;
    cfg.spec_adaptive = spec->adaptive;
    cfg.spec_max_batch = n_seqs;
  }
  EngineCore core(m, nullptr, cfg);
  const auto toks = random_tokens(n_seqs * (depth + 1), m.config().n_vocab, seed);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const auto first = toks.begin() + s * (depth + 1);
    core.add_request(bench_request({first, first + depth + 1}, depth > 0 ? n_steps + 1 : n_steps));
  }
  // With a depth, the prompts' step (which also samples each sequence's first token) is not timed.
  while (depth > 0 && core.has_work() && core.stats().generated_tokens < n_seqs) core.step();
  const double t0 = now_s();
  while (core.has_work()) core.step();
  const double tps = static_cast<double>(n_steps * n_seqs) / (now_s() - t0);
  if (spec) {
    const EngineStats st = core.stats();
    spec->proposed += st.draft_tokens;
    spec->accepted += st.accepted_tokens;
    spec->decode_rows += st.decode_rows;
    spec->generated += st.generated_tokens;
  }
  return tps;
}

struct BenchOptions {
  std::optional<std::string> model;
  int64_t n_prompt = 512, n_gen = 128, reps = 5, batched_steps = 16;
  int64_t depth = 0;  // positions already in the cache when a tg run starts
  std::vector<int64_t> batch_sizes;
  Activations act = Activations::Q8;
  KvType kv_type = KvType::F16;
  bool json = false;
  BackendFlags backend;
  SpecFlags spec;
  DistFlags dist;
};

// Returns false after --help.
bool parse_bench_args(const Args& args, BenchOptions& o) {
  std::string batches = "1,4,16", kv_type = "f16";
  ArgParser p("bench",
              "Measure prompt processing (pp) and text generation (tg) tokens/s, mean ± sd over\n"
              "repetitions, and decode throughput with B sequences at once; each next to this\n"
              "machine's bound (measured read bandwidth for tg, measured peak multiply-add for pp).\n"
              "A mixture of experts is bounded by the bytes a step reads: the dense weights plus k\n"
              "experts per layer at B = 1, E*(1-(1-k/E)^B) at B; the experts it ran are printed.");
  p.positional("MODEL", &o.model, "model file (GGUF) or name (ORG/NAME, ollama:NAME; see run --help)");
  p.option("-p,--n-prompt", &o.n_prompt, "N", "prompt tokens per pp run; 0 = skip pp", 0, 1 << 16);
  p.option("-n,--n-gen", &o.n_gen, "N", "generated tokens per tg run; 0 = skip tg", 0, 1 << 16);
  p.option("-r,--repetitions", &o.reps, "N", "repetitions of each test", 1, 1000);
  p.option("-b,--batch", &batches, "LIST", "parallel sequences for batched decode, e.g. 1,4,16; empty = skip");
  p.option("--batched-steps", &o.batched_steps, "N", "decode steps per batched run", 1, 1 << 16);
  p.option("-d,--depth", &o.depth, "N",
           "tg and batched runs decode after a prompt of N tokens (not timed), like llama-bench's -d", 0, 1 << 20);
  p.option("--kv-type", &kv_type, "TYPE", "KV cache element type: " + std::string(kv_type_choices()));
  p.flag("--json", &o.json, "print one JSON object instead of the table");
  o.backend.add_to(p);
  o.spec.add_to(p);
  o.dist.add_to(p);
  if (!p.parse(args)) return false;
  o.act = o.backend.activations.value();
  const std::optional<KvType> kv = parse_kv_type(kv_type);
  if (!kv) throw UsageError("unknown --kv-type '" + kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  o.kv_type = *kv;
  o.batch_sizes = batches.empty() ? std::vector<int64_t>{} : parse_batch_list(batches);
  return true;
}

// What this machine allows for this model: the measured read bandwidth over the bytes a decode
// step reads (tg), and each matmul at its arithmetic's measured peak (pp).
struct Bounds {
  int64_t model_bytes = 0;
  double read_bytes = 0;  // weights per single-token decode step (k experts per layer for a mixture of experts)
  double kv_position_bytes = 0;  // K and V of one position, every layer (the cache type bench uses)
  int64_t depth = 0;             // positions in the cache before a tg run's first step
  BandwidthProbe probe;          // the probe's passes: best, median, worst
  // The bound's bandwidth: the best of the probe and of the read rates this run's own prefill and
  // decode reach (raise_bandwidth), since a probe that reads slower than the engine demonstrably
  // does on this machine in the same minutes is no bound.
  double bandwidth = 0, decode_bandwidth = 0, prefill_bandwidth = 0;
  double peak_flops = 0, peak_int8 = 0, peak_bf16 = 0, tg = 0, pp = 0;
  int64_t n_experts = 0, n_used = 0;  // E, k (0 for a dense model)

  // K/V bytes a decode step reads per sequence, on average over a run of `steps` tokens after
  // `depth` positions: the step at position p attends over p + 1 positions.
  double kv_bytes(int64_t steps) const {
    return kv_position_bytes * (static_cast<double>(depth) + static_cast<double>(steps + 1) / 2);
  }
  // Decode at batch 1 over `steps` tokens, at bandwidth `bw`.
  double single(int64_t steps, double bw) const { return bw / (read_bytes + kv_bytes(steps)); }
  // B sequences share each weight read (not their K/V), so the bandwidth bound grows with B until
  // compute (the pp bound) takes over; a mixture of experts reads the E·(1 − (1 − k/E)^B)
  // experts B tokens are expected to touch (the dense weights once).
  // Takes a read rate the run reached as the bound's bandwidth where it beats the probe's.
  void raise_bandwidth(double bw, int64_t n_gen) {
    if (bw <= bandwidth) return;
    bandwidth = bw;
    tg = single(n_gen, bw);
  }
  // Which of the three the bound is.
  const char* bandwidth_source() const {
    if (bandwidth == decode_bandwidth && decode_bandwidth > probe.best) return "decode";
    if (bandwidth == prefill_bandwidth && prefill_bandwidth > probe.best) return "prefill";
    return "probe";
  }
  double batched(const Model& m, int64_t batch, double experts, int64_t steps) const {
    const double bytes = weight_bytes_per_step(m, experts) + static_cast<double>(batch) * kv_bytes(steps);
    return std::min(static_cast<double>(batch) * bandwidth / bytes, pp);
  }
};

Bounds measure_bounds(const Model& m, const ExecutionContext& ctx, const BenchOptions& o) {
  Bounds b;
  b.n_experts = m.config().moe.n_experts();
  b.n_used = m.config().moe.n_used();
  for (const TensorView& t : m.file().tensors) b.model_bytes += static_cast<int64_t>(t.data.size());
  b.read_bytes = weight_bytes_per_step(m, static_cast<double>(b.n_used));
  const KvShape kv = m.kv_shape();
  b.kv_position_bytes = 2.0 * static_cast<double>(kv.n_layers * kv.n_kv_heads) *
                        static_cast<double>(kv_row_bytes(o.kv_type, kv.head_dim));
  b.depth = o.depth;
  const MatmulFlops flops = matmul_flops_per_token(m, o.act);
  const MachineBounds machine = ctx.measure_bounds({.int8 = flops.int8 > 0, .bf16 = flops.bf16 > 0});
  b.probe = machine.bandwidth;
  b.bandwidth = b.probe.best;
  b.peak_flops = machine.peak_f32;
  b.peak_int8 = machine.peak_int8;
  b.peak_bf16 = machine.peak_bf16;
  b.tg = b.single(o.n_gen, b.bandwidth);
  // Each matmul at its own arithmetic's roof: seconds per token add up.
  b.pp = 1.0 / (flops.f32 / b.peak_flops + (flops.int8 > 0 ? flops.int8 / b.peak_int8 : 0.0) +
                flops.bf16 / (b.peak_bf16 > 0 ? b.peak_bf16 : b.peak_flops));
  if (!o.json) {
    std::fprintf(stderr, "[bench] %s: %.2f GB of weights (%.2f GB read per token%s), %s\n", m.file().path.c_str(),
                 b.model_bytes / 1e9, b.read_bytes / 1e9,
                 b.n_experts > 0 ? (": " + std::to_string(b.n_used) + " of " + std::to_string(b.n_experts) +
                                    " experts per layer").c_str()
                                 : "",
                 ctx.describe().c_str());
    std::fprintf(stderr,
                 "[bench] measured read bandwidth %.1f GB/s (best of %d passes; median %.1f, worst %.1f) -> tg bound "
                 "%.1f tok/s (%.1f at the median; weights + %.2f MB of K/V per token on average)\n",
                 b.bandwidth / 1e9, b.probe.passes, b.probe.median / 1e9, b.probe.worst / 1e9, b.tg,
                 b.single(o.n_gen, b.probe.median), b.kv_bytes(o.n_gen) / 1e6);
    std::fprintf(stderr,
                 "[bench] peak f32 %.1f GFLOP/s, int8 %.1f GOP/s, bf16 %.1f GFLOP/s; %.2f GFLOP f32 + %.2f GOP int8 + "
                 "%.2f GFLOP bf16 per token -> pp bound %.1f tok/s\n",
                 b.peak_flops / 1e9, b.peak_int8 / 1e9, b.peak_bf16 / 1e9, flops.f32 / 1e9, flops.int8 / 1e9,
                 flops.bf16 / 1e9, b.pp);
  }
  return b;
}

// Distinct experts per layer per forward call since the last reset (0 for a dense model).
double measured_experts(const Model& m) {
  const Model::MoeStats& st = m.moe_stats();
  return st.layer_steps > 0 ? static_cast<double>(st.experts_run) / static_cast<double>(st.layer_steps) : 0.0;
}

Stats repeat(int64_t reps, const std::function<double(uint32_t)>& run) {
  std::vector<double> v;
  for (int64_t r = 0; r < reps; ++r) v.push_back(run(static_cast<uint32_t>(r + 1)));
  return stats(v);
}

void print_row(const std::string& test, const Stats& s, double bound) {
  std::printf("| %-8s | %10.2f ± %-8.2f tok/s | bound %10.2f tok/s | %5.1f %% of bound |\n", test.c_str(), s.mean, s.sd,
              bound, 100.0 * s.mean / bound);
  std::fflush(stdout);
}

nlohmann::json result_json(int64_t tokens, const Stats& s, double bound) {
  return {{"tokens", tokens},
          {"tps_mean", s.mean},
          {"tps_sd", s.sd},
          {"bound_tps", bound},
          {"pct_of_bound", 100.0 * s.mean / bound}};
}

// Decode with B sequences at once, for each B of -b: tokens/s against the bound; for a mixture
// of experts also the distinct experts a step ran per layer, measured and expected.
nlohmann::json run_batched(Model& m, ModelRunner& runner, const Bounds& b, const BenchOptions& o, SpecTotals& spec) {
  nlohmann::json batched = nlohmann::json::array();
  for (int64_t batch : o.batch_sizes) {
    m.reset_moe_stats();
    const Stats s = repeat(o.reps, [&](uint32_t seed) { return run_tg(runner, o.kv_type, batch, o.batched_steps, seed, &spec, o.depth); });
    const double expected = expected_experts_touched(b.n_experts, b.n_used, batch);
    const double bound = b.batched(m, batch, expected, o.batched_steps);
    if (!o.json) print_row("B=" + std::to_string(batch), s, bound);
    nlohmann::json row = {{"batch", batch}, {"tps_mean", s.mean}, {"tps_sd", s.sd}, {"bound_tps", bound}};
    if (b.n_experts > 0) {
      const double measured = measured_experts(m), at_measured = b.batched(m, batch, measured, o.batched_steps);
      row["experts_touched"] = measured;
      row["experts_touched_expected"] = expected;
      row["bound_at_measured_tps"] = at_measured;
      if (!o.json) {
        std::printf("|          | experts per layer per step: %.1f run, %.1f expected of %lld; bound at the run "
                    "count %.2f tok/s (%.1f %%) |\n",
                    measured, expected, static_cast<long long>(b.n_experts), at_measured, 100.0 * s.mean / at_measured);
      }
    }
    batched.push_back(row);
  }
  return batched;
}

// Rank 0's communication during the tg runs, per generated token: bytes on the wire, and the
// all-reduces with their cost per layer (what tensor parallelism pays for its bandwidth).
nlohmann::json comm_json(ModelHost& host, const BenchOptions& o, const ModelConfig& c, const Stats& tg) {
  const dist::CommStats st = host.session()->comm_stats();
  const double tokens = static_cast<double>(o.n_gen * o.reps);
  const double per_reduce_us = st.all_reduces > 0 ? 1e6 * st.all_reduce_s / static_cast<double>(st.all_reduces) : 0;
  const double reduces_per_token = static_cast<double>(st.all_reduces) / tokens;
  const double share = tg.mean * reduces_per_token * per_reduce_us * 1e-6;  // of decode time
  nlohmann::json j = {{"layout", host.session()->layout().describe()},
                      {"bytes_sent_per_token", static_cast<double>(st.bytes_sent) / tokens},
                      {"bytes_received_per_token", static_cast<double>(st.bytes_received) / tokens},
                      {"all_reduces_per_token", reduces_per_token},
                      {"all_reduce_us", per_reduce_us},
                      {"all_reduce_us_per_layer", per_reduce_us * reduces_per_token / static_cast<double>(c.n_layers)},
                      {"all_reduce_share_of_decode", share}};
  if (!o.json) {
    std::fprintf(stderr,
                 "[bench] rank 0 during tg (%s): %.1f KiB sent + %.1f KiB received per token; %.1f all-reduces per "
                 "token, %.1f us each (%.1f us per layer, %.0f%% of decode time)\n",
                 host.session()->layout().describe().c_str(), j["bytes_sent_per_token"].get<double>() / 1024,
                 j["bytes_received_per_token"].get<double>() / 1024, reduces_per_token, per_reduce_us,
                 j["all_reduce_us_per_layer"].get<double>(), 100 * share);
  }
  return j;
}

// The thread pool during the tg runs, per generated token: how often the threads met, how long
// each meeting lasted, the share of those meetings a thread spent idle (waking, or waiting for the
// last task), and the share of the step the caller ran alone, outside any parallel call.
nlohmann::json pool_json(const PoolStats& st, int threads, double tokens, double seconds, bool quiet) {
  const double wall = static_cast<double>(st.wall_ns) * 1e-9, busy = static_cast<double>(st.busy_ns) * 1e-9;
  const double per_dispatch_us = st.dispatches > 0 ? 1e6 * wall / static_cast<double>(st.dispatches) : 0;
  const double idle_share = wall > 0 && threads > 1 ? std::max(0.0, 1 - busy / (threads * wall)) : 0;
  const double serial_share = seconds > 0 ? std::max(0.0, 1 - wall / seconds) : 0;
  nlohmann::json j = {{"dispatches_per_token", static_cast<double>(st.dispatches) / tokens},
                      {"tasks_per_token", static_cast<double>(st.tasks) / tokens},
                      {"us_per_dispatch", per_dispatch_us},
                      {"idle_share_in_dispatches", idle_share},
                      {"serial_share_of_decode", serial_share},
                      {"worker_sleeps_per_token", static_cast<double>(st.sleeps) / tokens}};
  if (!quiet) {
    std::fprintf(stderr,
                 "[bench] thread pool during tg: %.1f parallel calls per token, %.1f us each, threads idle %.1f%% of "
                 "them; the caller alone %.1f%% of decode time; workers fell asleep %.1f times per token\n",
                 j["dispatches_per_token"].get<double>(), per_dispatch_us, 100 * idle_share, 100 * serial_share,
                 j["worker_sleeps_per_token"].get<double>());
  }
  return j;
}

}  // namespace

int bench_command(const Args& args) {
  BenchOptions o;
  if (!parse_bench_args(args, o)) return 0;
  o.dist.check_spec(o.spec);
  const std::shared_ptr<ExecutionContext> ctx = o.backend.make_context();
  ModelHost host(o.dist, "bench", [&] { return open_model_arg(o.model, std::nullopt); }, ctx);
  if (host.worker()) return host.serve_steps();
  Model& m = host.model();
  ModelRunner& runner = host.runner();
  if (const int64_t need = o.depth + std::max(o.n_gen, o.batched_steps) + 2;
      o.depth > 0 && need > m.config().context_length) {
    throw UsageError("--depth " + std::to_string(o.depth) + " and the tokens after it need " + std::to_string(need) +
                     " positions; the model's context is " + std::to_string(m.config().context_length));
  }
  Bounds b = measure_bounds(m, *ctx, o);
  run_tg(runner, o.kv_type, 1, 2, 1);  // warm-up: maps the weights in and sizes the scratch buffers, outside the timings

  nlohmann::json out;
  out["model"] = m.file().path;
  out["isa"] = ctx->instruction_set();
  out["threads"] = o.backend.threads;
  out["processes"] = host.distributed() ? host.session()->layout().ranks() : 1;
  out["model_bytes"] = b.model_bytes;
  out["bytes_read_per_token"] = b.read_bytes;
  out["bandwidth_probe_gbps"] = b.probe.best / 1e9;
  out["bandwidth_median_gbps"] = b.probe.median / 1e9;
  out["bandwidth_worst_gbps"] = b.probe.worst / 1e9;
  out["bandwidth_passes"] = b.probe.passes;
  out["kv_bytes_per_position"] = b.kv_position_bytes;
  out["peak_gflops"] = b.peak_flops / 1e9;
  out["peak_int8_gops"] = b.peak_int8 / 1e9;
  out["peak_bf16_gflops"] = b.peak_bf16 / 1e9;
  out["activations"] = o.act == Activations::Q8 ? "q8" : "f32";
  out["kv_type"] = kv_type_name(o.kv_type);
  if (o.n_prompt > 0) {
    const Stats s = repeat(o.reps, [&](uint32_t seed) { return run_pp(runner, o.kv_type, o.n_prompt, seed); });
    if (!o.json) print_row("pp" + std::to_string(o.n_prompt), s, b.pp);
    out["pp"] = result_json(o.n_prompt, s, b.pp);
    // A prefill step reads the weights once for all its tokens (its best repetition).
    b.prefill_bandwidth = b.read_bytes * s.best / static_cast<double>(o.n_prompt);
    b.raise_bandwidth(b.prefill_bandwidth, o.n_gen);
  }
  SpecTotals spec;
  int64_t draft_tokens = o.n_gen + 1 + o.spec.tokens;  // a draft cache for the largest tg run
  for (int64_t batch : o.batch_sizes)
    draft_tokens = std::max(draft_tokens, batch * (o.batched_steps + 1 + o.spec.tokens));
  spec.proposer = o.spec.make_proposer(m, o.model, draft_tokens + 64);
  spec.k = o.spec.tokens;
  spec.adaptive = !o.spec.fixed;
  if (o.n_gen > 0) {
    m.reset_moe_stats();
    if (host.distributed()) host.session()->reset_comm_stats();
    ctx->reset_work_stats();
    const double t0 = now_s();
    const Stats s =
        repeat(o.reps, [&](uint32_t seed) { return run_tg(runner, o.kv_type, 1, o.n_gen, seed, &spec, o.depth); });
    const double tg_seconds = now_s() - t0;
    // Plain decode (one process, no speculation) reads the weights and its K/V once per token.
    if (!spec.proposer && !host.distributed()) {
      b.decode_bandwidth = s.best * (b.read_bytes + b.kv_bytes(o.n_gen));
      b.raise_bandwidth(b.decode_bandwidth, o.n_gen);
    }
    if (!o.json) {
      std::fprintf(stderr,
                   "[bench] bandwidth bound %.1f GB/s, the best of the probe (%.1f), decode's own read rate (%.1f) and "
                   "prefill's (%.1f): %s\n",
                   b.bandwidth / 1e9, b.probe.best / 1e9, b.decode_bandwidth / 1e9, b.prefill_bandwidth / 1e9,
                   b.bandwidth_source());
      const std::string depth_label = o.depth > 0 ? "@d" + std::to_string(o.depth) : "";
      print_row("tg" + std::to_string(o.n_gen) + depth_label, s, b.tg);
    }
    out["tg"] = result_json(o.n_gen, s, b.tg);
    out["tg"]["depth"] = o.depth;
    out["tg"]["kv_bytes_read_per_token"] = b.kv_bytes(o.n_gen);
    out["tg"]["bound_tps_at_median_bandwidth"] = b.single(o.n_gen, b.probe.median);
    if (host.distributed()) out["tg"]["comm"] = comm_json(host, o, m.config(), s);
    out["tg"]["pool"] = pool_json(ctx->work_stats(), ctx->n_threads(), static_cast<double>(o.n_gen * o.reps),
                                  tg_seconds, o.json);
    if (b.n_experts > 0) out["tg"]["experts_touched"] = measured_experts(m);
  }
  out["bandwidth_gbps"] = b.bandwidth / 1e9;  // the bound's: the best of the three
  out["bandwidth_decode_gbps"] = b.decode_bandwidth / 1e9;
  out["bandwidth_prefill_gbps"] = b.prefill_bandwidth / 1e9;
  out["bandwidth_source"] = b.bandwidth_source();
  out["batched"] = run_batched(m, runner, b, o, spec);
  if (spec.proposer) {
    const double rate = spec.proposed > 0 ? static_cast<double>(spec.accepted) / static_cast<double>(spec.proposed) : 0;
    const double per_pass =
        spec.decode_rows > 0 ? static_cast<double>(spec.generated) / static_cast<double>(spec.decode_rows) : 0;
    out["spec"] = {
        {"proposer", o.spec.proposer_name()}, {"k", o.spec.tokens},      {"proposed", spec.proposed},
        {"accepted", spec.accepted},          {"acceptance_rate", rate}, {"tokens_per_target_pass", per_pass}};
    if (!o.json) {
      std::printf("speculation (%s, k=%lld): %.0f%% of proposals accepted, %.2f tokens per sequence per target pass\n",
                  o.spec.proposer_name().c_str(), static_cast<long long>(o.spec.tokens), 100 * rate, per_pass);
    }
  }
  if (o.json) std::puts(out.dump().c_str());
  return 0;
}

}  // namespace peregrine::cli
