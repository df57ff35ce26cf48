// `peregrine bench-serve`: an offline serving benchmark in the manner of vLLM's
// benchmark_serving: a seeded workload of requests with random prompt and output lengths arrives
// by a Poisson process (or all at once) at the serving engine; the report gives request and
// output-token throughput, TTFT / TPOT / ITL percentiles, preemptions, the prefix-cache hit rate
// and the share of slot-steps (max_seqs per forward pass) that did useful work.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "engine/engine_core.h"
#include "kernels/thread_pool.h"
#include "kv/kv_plan.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Range {
  int64_t lo, hi;
};

Range parse_range(const std::string& flag, const std::string& text) {
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    const int64_t lo = std::stoll(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) throw std::invalid_argument(text);
    int64_t hi = lo;
    if (colon != std::string::npos) {
      hi = std::stoll(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) throw std::invalid_argument(text);
    }
    if (lo < 1 || hi < lo) throw std::invalid_argument(text);
    return {lo, hi};
  } catch (const std::exception&) {
    throw UsageError(flag + " '" + text + "': expected MIN:MAX (or N) with 1 <= MIN <= MAX");
  }
}

struct Workload {
  std::vector<Request> requests;
  std::vector<double> arrival_s;  // [n] seconds after the start
};

Workload make_workload(const Tokenizer& tok, int64_t n, double rate, Range in, Range out, double prefix_share,
                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto random_token = [&] {
    while (true) {
      const auto t = static_cast<TokenId>(uniform(0, tok.n_vocab() - 1));
      if (!tok.is_control(t)) return t;
    }
  };
  std::vector<TokenId> shared(static_cast<size_t>(in.hi));
  for (auto& t : shared) t = random_token();
  Workload w;
  double t = 0;
  std::exponential_distribution<double> gap(std::isinf(rate) ? 1.0 : rate);
  for (int64_t i = 0; i < n; ++i) {
    Request r;
    const int64_t len = uniform(in.lo, in.hi);
    const auto n_shared = static_cast<int64_t>(std::floor(prefix_share * static_cast<double>(len)));
    if (tok.bos() >= 0) r.prompt.push_back(tok.bos());
    r.prompt.insert(r.prompt.end(), shared.begin(), shared.begin() + n_shared);
    while (static_cast<int64_t>(r.prompt.size()) < len) r.prompt.push_back(random_token());
    r.max_tokens = uniform(out.lo, out.hi);
    r.ignore_eos = true;  // exact output lengths, as benchmarks do
    r.sampling.temperature = 0;
    w.requests.push_back(std::move(r));
    w.arrival_s.push_back(t);
    if (!std::isinf(rate)) t += gap(rng);
  }
  return w;
}

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(std::min<double>(static_cast<double>(v.size()) - 1, std::floor(q * static_cast<double>(v.size()))))]; };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

nlohmann::json to_json(const Percentiles& p) { return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}}; }

struct RunReport {
  double duration_s = 0;
  double output_tps = 0, request_tps = 0;
  Percentiles ttft_ms, tpot_ms, itl_ms;
  int64_t output_tokens = 0, errors = 0;
  EngineStats stats;
};

RunReport run_workload(Model& model, const Tokenizer& tok, const Workload& w, const EngineConfig& cfg) {
  EngineCore core(model, &tok, cfg);
  const size_t n = w.requests.size();
  std::vector<std::vector<double>> token_times(n);  // seconds since start, per generated token
  std::vector<double> arrived(n, 0);
  const auto start = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  size_t next = 0, ended = 0;
  RunReport rep;
  while (ended < n) {
    const double now = now_s();
    while (next < n && w.arrival_s[next] <= now) {
      arrived[next] = w.arrival_s[next];
      const size_t index = next;
      core.add_request(static_cast<RequestId>(index), w.requests[index], [&, index](const RequestEvent& ev) {
        if (ev.has_token) token_times[index].push_back(now_s());
        if (ev.finish == RequestFinish::Error) ++rep.errors;
        if (ev.finish != RequestFinish::None) ++ended;
      });
      ++next;
    }
    if (core.has_work()) {
      core.step();
    } else if (next < n) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, w.arrival_s[next] - now_s())));
    }
  }
  rep.duration_s = now_s();
  std::vector<double> ttft, tpot, itl;
  for (size_t i = 0; i < n; ++i) {
    const auto& t = token_times[i];
    rep.output_tokens += static_cast<int64_t>(t.size());
    if (t.empty()) continue;
    ttft.push_back(1000 * (t.front() - arrived[i]));
    if (t.size() > 1) tpot.push_back(1000 * (t.back() - t.front()) / static_cast<double>(t.size() - 1));
    for (size_t k = 1; k < t.size(); ++k) itl.push_back(1000 * (t[k] - t[k - 1]));
  }
  rep.ttft_ms = percentiles(ttft);
  rep.tpot_ms = percentiles(tpot);
  rep.itl_ms = percentiles(itl);
  rep.output_tps = static_cast<double>(rep.output_tokens) / rep.duration_s;
  rep.request_tps = static_cast<double>(n) / rep.duration_s;
  rep.stats = core.stats();
  return rep;
}

nlohmann::json report_json(const RunReport& r) {
  return {{"duration_s", r.duration_s},
          {"output_tps", r.output_tps},
          {"request_tps", r.request_tps},
          {"output_tokens", r.output_tokens},
          {"ttft_ms", to_json(r.ttft_ms)},
          {"tpot_ms", to_json(r.tpot_ms)},
          {"itl_ms", to_json(r.itl_ms)},
          {"slot_utilization", r.stats.slot_utilization()},
          {"preemptions", r.stats.preemptions},
          {"prefix_hit_rate", r.stats.prefix_hit_rate},
          {"errors", r.errors},
          {"steps", r.stats.steps}};
}

void print_table(const std::vector<std::pair<std::string, RunReport>>& runs) {
  std::printf("%-22s", "");
  for (const auto& [name, r] : runs) std::printf("%16s", name.c_str());
  std::printf("\n");
  auto row = [&](const char* label, auto get, const char* fmt) {
    std::printf("%-22s", label);
    for (const auto& [name, r] : runs) std::printf(fmt, get(r));
    std::printf("\n");
  };
  row("duration (s)", [](const RunReport& r) { return r.duration_s; }, "%16.2f");
  row("output tokens/s", [](const RunReport& r) { return r.output_tps; }, "%16.1f");
  row("requests/s", [](const RunReport& r) { return r.request_tps; }, "%16.2f");
  row("TTFT p50/p90/p99 ms", [](const RunReport& r) { return r.ttft_ms.p50; }, "%16.1f");
  row("", [](const RunReport& r) { return r.ttft_ms.p90; }, "%16.1f");
  row("", [](const RunReport& r) { return r.ttft_ms.p99; }, "%16.1f");
  row("TPOT p50/p90/p99 ms", [](const RunReport& r) { return r.tpot_ms.p50; }, "%16.2f");
  row("", [](const RunReport& r) { return r.tpot_ms.p90; }, "%16.2f");
  row("", [](const RunReport& r) { return r.tpot_ms.p99; }, "%16.2f");
  row("ITL p50/p90/p99 ms", [](const RunReport& r) { return r.itl_ms.p50; }, "%16.2f");
  row("", [](const RunReport& r) { return r.itl_ms.p90; }, "%16.2f");
  row("", [](const RunReport& r) { return r.itl_ms.p99; }, "%16.2f");
  row("preemptions", [](const RunReport& r) { return static_cast<double>(r.stats.preemptions); }, "%16.0f");
  row("prefix hit rate", [](const RunReport& r) { return r.stats.prefix_hit_rate; }, "%16.3f");
  row("slot utilization", [](const RunReport& r) { return r.stats.slot_utilization(); }, "%16.3f");
  if (runs.size() == 2 && runs[1].second.output_tps > 0) {
    std::printf("%-22s%16.2fx\n", "output tps ratio", runs[0].second.output_tps / runs[1].second.output_tps);
  }
}

}  // namespace

int bench_serve_command(const Args& args) {
  std::optional<std::string> model, tokenizer;
  int64_t n_requests = 64, max_batched = 512, max_seqs = 16, threads = physical_core_count();
  uint64_t seed = 0;
  std::string rate_text = "inf", input_len = "128:512", output_len = "64:256", policy = "continuous";
  std::string kv_memory = "2GiB", kv_type_text = "f16";
  double prefix_share = 0;
  bool no_prefix_caching = false, compare = false, json = false;
  ArgParser p("bench-serve", "Offline serving benchmark: Poisson arrivals, random lengths, continuous or static batching.");
  p.positional("MODEL", &model, "model file (GGUF, or llama2.c .bin with --tokenizer); default: the embedded demo model");
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--requests", &n_requests, "N", "number of requests", 1, 1000000);
  p.option("--rate", &rate_text, "R|inf", "Poisson arrival rate in requests/s; inf = all at once");
  p.option("--input-len", &input_len, "MIN:MAX", "prompt tokens, uniform in [MIN, MAX]");
  p.option("--output-len", &output_len, "MIN:MAX", "generated tokens, uniform in [MIN, MAX]");
  p.option("--prefix-share", &prefix_share, "F", "share of each prompt that is a common prefix", 0, 1);
  p.flag("--no-prefix-caching", &no_prefix_caching, "turn prefix caching off");
  p.option("--policy", &policy, "P", "continuous | static");
  p.flag("--compare-policies", &compare, "run continuous and static on the same workload, side by side");
  p.option("--max-batched-tokens", &max_batched, "N", "tokens per forward pass", 1, 1 << 20);
  p.option("--max-seqs", &max_seqs, "N", "sequences per forward pass (the max batch)", 1, 1 << 16);
  p.option("--kv-cache-memory", &kv_memory, "SIZE", "KV cache budget, e.g. 2GiB");
  p.option("--kv-type", &kv_type_text, "TYPE", "KV cache element type: f16, bf16, f32");
  p.option("--seed", &seed, "S", "workload seed");
  p.option("-t,--threads", &threads, "N", "compute threads (default: physical cores)", 1, 1024);
  p.flag("--json", &json, "print one JSON object");
  if (!p.parse(args)) return 0;

  double rate = 0;
  if (rate_text == "inf") {
    rate = INFINITY;
  } else {
    try {
      rate = std::stod(rate_text);
    } catch (const std::exception&) {
      rate = -1;
    }
    if (!(rate > 0) || std::isinf(rate)) throw UsageError("--rate '" + rate_text + "': expected a positive number or inf");
  }
  if (policy != "continuous" && policy != "static") throw UsageError("--policy '" + policy + "': choose continuous or static");
  const auto kv_type = parse_kv_type(kv_type_text);
  if (!kv_type) throw UsageError("unknown --kv-type '" + kv_type_text + "' (choose f16, bf16 or f32)");
  const Range in = parse_range("--input-len", input_len), out = parse_range("--output-len", output_len);

  ModelFile mf = open_model_arg(model, tokenizer);
  const Tokenizer tok = Tokenizer::from_metadata(mf.meta, mf.path);
  Model m(std::move(mf), static_cast<int>(threads));
  const ModelConfig& c = m.config();
  if (in.hi + out.hi > c.context_length) {
    throw UsageError("--input-len and --output-len maxima add up to more than the context length " +
                     std::to_string(c.context_length));
  }
  const KvPlan plan = plan_kv_cache(c, *kv_type, parse_memory_size(kv_memory));
  std::fprintf(stderr, "[bench-serve] %s\n", describe_kv_plan(plan, *kv_type, c.context_length).c_str());

  const Workload w = make_workload(tok, n_requests, rate, in, out, prefix_share, seed);
  EngineConfig cfg;
  cfg.kv_type = *kv_type;
  cfg.kv_blocks = plan.n_blocks;
  cfg.block_size = plan.block_size;
  cfg.prefix_caching = !no_prefix_caching;
  cfg.scheduler.max_batched_tokens = max_batched;
  cfg.scheduler.max_seqs = max_seqs;

  std::vector<std::pair<std::string, RunReport>> runs;
  const std::vector<std::string> policies = compare ? std::vector<std::string>{"continuous", "static"} : std::vector<std::string>{policy};
  for (const std::string& name : policies) {
    cfg.scheduler.policy = name == "static" ? SchedulePolicy::Static : SchedulePolicy::Continuous;
    std::fprintf(stderr, "[bench-serve] %s: %lld requests...\n", name.c_str(), static_cast<long long>(n_requests));
    runs.emplace_back(name, run_workload(m, tok, w, cfg));
  }
  if (json) {
    nlohmann::json j;
    for (const auto& [name, r] : runs) j[name] = report_json(r);
    j["requests"] = n_requests;
    j["max_seqs"] = max_seqs;
    j["max_batched_tokens"] = max_batched;
    j["kv_blocks"] = plan.n_blocks;
    j["prefix_caching"] = !no_prefix_caching;
    if (runs.size() == 2 && runs[1].second.output_tps > 0) j["output_tps_ratio"] = runs[0].second.output_tps / runs[1].second.output_tps;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_table(runs);
  }
  for (const auto& [name, r] : runs) {
    if (r.errors > 0) return 1;
  }
  return 0;
}

}  // namespace peregrine::cli
