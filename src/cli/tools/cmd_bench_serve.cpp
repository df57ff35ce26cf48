// `peregrine bench-serve`: an offline serving benchmark in the manner of vLLM's
// benchmark_serving: a seeded workload of requests with random prompt and output lengths arrives
// by a Poisson process (or all at once) at the serving engine; the report gives request and
// output-token throughput, TTFT / TPOT / ITL percentiles, preemptions, the prefix-cache hit rate
// and the share of slot-steps (max_seqs per forward pass) that did useful work. With --url the same
// workload goes over HTTP to a live OpenAI-compatible server (`peregrine serve` or another) as
// concurrent streaming clients (http_load.h), timed from the client side; --goodput counts the
// requests that met TTFT/TPOT objectives, in both modes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/constraint_flags.h"
#include "cli/engine_flags.h"
#include "cli/model_host.h"
#include "cli/model_loading.h"
#include "cli/tools/http_load.h"
#include "engine/engine_core.h"
#include "kv/kv_type.h"
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

// How output lengths are drawn in [MIN, MAX]: uniformly, or exponentially (MIN plus an
// exponential with mean (MAX - MIN) / 2, cut at MAX: many short answers and a few long ones, as
// chat traffic has; continuous batching gains most there, because a static batch waits for its
// longest member).
enum class OutputDist { Uniform, Exponential };

struct Workload {
  std::vector<Request> requests;
  std::vector<double> arrival_s;  // [n] seconds after the start
};

Workload make_workload(const Tokenizer& tok, int64_t n, double rate, Range in, Range out, OutputDist out_dist,
                       double prefix_share, uint64_t seed) {
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
  const double extra_mean = std::max(0.5, static_cast<double>(out.hi - out.lo) / 2);
  std::exponential_distribution<double> extra(1.0 / extra_mean);
  auto output_len = [&] {
    if (out_dist == OutputDist::Uniform) return uniform(out.lo, out.hi);
    return std::min(out.hi, out.lo + static_cast<int64_t>(std::llround(extra(rng))));
  };
  for (int64_t i = 0; i < n; ++i) {
    Request r;
    const int64_t len = uniform(in.lo, in.hi);
    const auto n_shared = static_cast<int64_t>(std::floor(prefix_share * static_cast<double>(len)));
    if (tok.bos() >= 0) r.prompt.push_back(tok.bos());
    r.prompt.insert(r.prompt.end(), shared.begin(), shared.begin() + n_shared);
    while (static_cast<int64_t>(r.prompt.size()) < len) r.prompt.push_back(random_token());
    r.max_tokens = output_len();
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
  auto at = [&](double q) {
    return v[static_cast<size_t>(
        std::min<double>(static_cast<double>(v.size()) - 1, std::floor(q * static_cast<double>(v.size()))))];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

nlohmann::json to_json(const Percentiles& p) { return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}}; }

// What one request's timeline looked like, in either mode: when it started (arrival offline, the
// send over HTTP), when each token (offline) or streamed chunk (HTTP) came, and how many tokens it
// generated (offline: one per event; HTTP: the server's usage count).
struct RequestTiming {
  bool ok = false;
  double start_s = 0;
  std::vector<double> token_times_s;
  int64_t output_tokens = 0;
};

// Service-level objectives for goodput (vLLM's --goodput): a request counts when it succeeded and
// met every objective given. Unset objectives are infinite.
struct Slo {
  double ttft_ms = INFINITY, tpot_ms = INFINITY;
  bool given = false;
};

Slo parse_slo(const std::string& text) {
  Slo slo;
  if (text.empty()) return slo;
  slo.given = true;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const size_t colon = item.find(':');
    const std::string key = item.substr(0, colon);
    double value = -1;
    try {
      size_t used = 0;
      if (colon != std::string::npos) value = std::stod(item.substr(colon + 1), &used);
      if (used != item.size() - colon - 1) value = -1;
    } catch (const std::exception&) {
      value = -1;
    }
    if (!(value > 0) || std::isinf(value) || (key != "ttft_ms" && key != "tpot_ms")) {
      throw UsageError("--goodput '" + text + "': expected ttft_ms:X,tpot_ms:Y with positive milliseconds");
    }
    (key == "ttft_ms" ? slo.ttft_ms : slo.tpot_ms) = value;
    pos = comma + 1;
  }
  return slo;
}

struct RunReport {
  double duration_s = 0;
  double output_tps = 0, request_tps = 0, goodput_rps = 0;
  Percentiles ttft_ms, tpot_ms, itl_ms;
  // Request finish time (end-to-end latency: arrival or send to the last token), what a user of a
  // whole answer waits for; continuous batching shortens it most for short requests.
  Percentiles finish_ms;
  double finish_mean_ms = 0;
  int64_t output_tokens = 0, completed = 0, good = 0, errors = 0;
  bool has_engine_stats = false;
  EngineStats stats;
};

RunReport summarize(const std::vector<RequestTiming>& timings, double duration_s, const Slo& slo) {
  RunReport rep;
  rep.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, finish;
  for (const RequestTiming& r : timings) {
    if (!r.ok) {
      ++rep.errors;
      continue;
    }
    ++rep.completed;
    rep.output_tokens += r.output_tokens;
    const auto& t = r.token_times_s;
    if (t.empty()) continue;
    const double first_ms = 1000 * (t.front() - r.start_s);
    ttft.push_back(first_ms);
    finish.push_back(1000 * (t.back() - r.start_s));
    double per_token_ms = 0;
    if (r.output_tokens > 1) {
      per_token_ms = 1000 * (t.back() - t.front()) / static_cast<double>(r.output_tokens - 1);
      tpot.push_back(per_token_ms);
    }
    for (size_t k = 1; k < t.size(); ++k) itl.push_back(1000 * (t[k] - t[k - 1]));
    if (first_ms <= slo.ttft_ms && per_token_ms <= slo.tpot_ms) ++rep.good;
  }
  rep.ttft_ms = percentiles(ttft);
  rep.tpot_ms = percentiles(tpot);
  rep.itl_ms = percentiles(itl);
  rep.finish_ms = percentiles(finish);
  for (double f : finish) rep.finish_mean_ms += f / static_cast<double>(finish.size());
  if (duration_s > 0) {
    rep.output_tps = static_cast<double>(rep.output_tokens) / duration_s;
    rep.request_tps = static_cast<double>(rep.completed) / duration_s;
    rep.goodput_rps = static_cast<double>(rep.good) / duration_s;
  }
  return rep;
}

// One CSV line per step the engine ran since `after` (StepTrace): what each step carried, what
// the step-time model predicted and the budget it was sized to, against what it took.
int64_t log_steps(const EngineCore& core, int64_t after, const std::string& policy, std::FILE* out) {
  std::vector<StepSummary> steps;
  std::vector<SlotCell> cells;
  const int64_t last = core.trace().copy_since(after, steps, cells);
  for (const StepSummary& s : steps) {
    std::fprintf(out, "%s,%lld,%.3f,%d,%d,%lld,%lld,%.3f,%.3f,%.3f\n", policy.c_str(), static_cast<long long>(s.step),
                 s.end_s, s.decode_rows, s.prefill_tokens, static_cast<long long>(s.context_tokens),
                 static_cast<long long>(s.attention_pairs), s.predicted_ms, s.budget_ms, s.ms);
  }
  return last;
}

RunReport run_workload(ModelRunner& model, const Tokenizer& tok, const Workload& w, const EngineConfig& cfg,
                       const Slo& slo, const std::string& policy, std::FILE* step_log) {
  EngineCore core(model, &tok, cfg);
  int64_t logged = 0;
  const size_t n = w.requests.size();
  std::vector<RequestTiming> timings(n);
  const auto start = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  size_t next = 0, ended = 0;
  while (ended < n) {
    const double now = now_s();
    while (next < n && w.arrival_s[next] <= now) {
      const size_t index = next;
      timings[index].start_s = w.arrival_s[index];
      core.add_request(static_cast<RequestId>(index), w.requests[index], [&, index](const RequestEvent& ev) {
        RequestTiming& t = timings[index];
        for (size_t i = 0; i < ev.tokens.size(); ++i) {
          t.token_times_s.push_back(now_s());
          ++t.output_tokens;
        }
        if (ev.finish != RequestFinish::None) {
          t.ok = ev.finish != RequestFinish::Error;
          ++ended;
        }
      });
      ++next;
    }
    if (core.has_work()) {
      core.step();
      // Every step, so the ring (StepTrace::kSteps) never laps the log.
      if (step_log != nullptr) logged = log_steps(core, logged, policy, step_log);
    } else if (next < n) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, w.arrival_s[next] - now_s())));
    }
  }
  RunReport rep = summarize(timings, now_s(), slo);
  rep.has_engine_stats = true;
  rep.stats = core.stats();
  return rep;
}

nlohmann::json report_json(const RunReport& r) {
  nlohmann::json j = {{"duration_s", r.duration_s},       {"output_tps", r.output_tps},
                      {"request_tps", r.request_tps},     {"goodput_rps", r.goodput_rps},
                      {"output_tokens", r.output_tokens}, {"completed", r.completed},
                      {"ttft_ms", to_json(r.ttft_ms)},    {"tpot_ms", to_json(r.tpot_ms)},
                      {"itl_ms", to_json(r.itl_ms)},      {"errors", r.errors},
                      {"finish_ms", {{"mean", r.finish_mean_ms}, {"p50", r.finish_ms.p50}, {"p90", r.finish_ms.p90},
                                     {"p99", r.finish_ms.p99}}}};
  if (r.has_engine_stats) {  // the engine's own counters; a server's are on its /metrics
    j["slot_utilization"] = r.stats.slot_utilization();
    j["preemptions"] = r.stats.preemptions;
    j["prefix_hit_rate"] = r.stats.prefix_hit_rate;
    j["steps"] = r.stats.steps;
    // Disaggregated prefill/decode: decode steps run while a prompt step was in the prefill pool.
    if (r.stats.steps_beside_prefill > 0) j["steps_beside_prefill"] = r.stats.steps_beside_prefill;
    // Steps past the ridge by the engine's own step-time model (null before it was fitted).
    j["compute_bound_step_share"] =
        r.stats.costed_steps > 0
            ? nlohmann::json(static_cast<double>(r.stats.compute_bound_steps) / static_cast<double>(r.stats.costed_steps))
            : nlohmann::json(nullptr);
    if (r.stats.grammar_rows > 0) {
      const double engine_ms = 1000 * r.duration_s;
      j["grammar"] = {{"masked_rows", r.stats.grammar_rows},
                      {"ms", r.stats.grammar_ms},
                      {"ms_per_step", r.stats.steps > 0 ? r.stats.grammar_ms / double(r.stats.steps) : 0.0},
                      {"share_of_time", engine_ms > 0 ? r.stats.grammar_ms / engine_ms : 0.0}};
    }
    if (r.stats.draft_tokens > 0 || r.stats.draft_passes > 0) {
      const auto& s = r.stats;
      j["spec"] = {
          {"target_passes", s.steps},
          {"draft_passes", s.draft_passes},
          {"proposed", s.draft_tokens},
          {"accepted", s.accepted_tokens},
          {"acceptance_rate", s.draft_tokens > 0 ? double(s.accepted_tokens) / double(s.draft_tokens) : 0.0},
          {"tokens_per_target_pass", s.decode_rows > 0 ? double(s.generated_tokens) / double(s.decode_rows) : 0.0}};
    }
  }
  return j;
}

nlohmann::json goodput_json(const RunReport& r, const Slo& slo) {
  auto objective = [](double v) { return std::isinf(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  return {{"ttft_ms", objective(slo.ttft_ms)},
          {"tpot_ms", objective(slo.tpot_ms)},
          {"good_requests", r.good},
          {"request_tps", r.goodput_rps}};
}

void print_table(const std::vector<std::pair<std::string, RunReport>>& runs) {
  std::printf("%-22s", "");
  for (const auto& [name, r] : runs) std::printf("%16s", name.c_str());
  std::printf("\n");
  auto row = [&](const char* label, const char* fmt, auto get) {
    std::printf("%-22s", label);
    for (const auto& [name, r] : runs) std::printf(fmt, get(r));
    std::printf("\n");
  };
  row("duration (s)", "%16.2f", [](const RunReport& r) { return r.duration_s; });
  row("output tokens/s", "%16.1f", [](const RunReport& r) { return r.output_tps; });
  row("requests/s", "%16.2f", [](const RunReport& r) { return r.request_tps; });
  row("goodput requests/s", "%16.2f", [](const RunReport& r) { return r.goodput_rps; });
  row("TTFT p50/p90/p99 ms", "%16.1f", [](const RunReport& r) { return r.ttft_ms.p50; });
  row("", "%16.1f", [](const RunReport& r) { return r.ttft_ms.p90; });
  row("", "%16.1f", [](const RunReport& r) { return r.ttft_ms.p99; });
  row("TPOT p50/p90/p99 ms", "%16.2f", [](const RunReport& r) { return r.tpot_ms.p50; });
  row("", "%16.2f", [](const RunReport& r) { return r.tpot_ms.p90; });
  row("", "%16.2f", [](const RunReport& r) { return r.tpot_ms.p99; });
  row("ITL p50/p90/p99 ms", "%16.2f", [](const RunReport& r) { return r.itl_ms.p50; });
  row("", "%16.2f", [](const RunReport& r) { return r.itl_ms.p90; });
  row("", "%16.2f", [](const RunReport& r) { return r.itl_ms.p99; });
  row("finish mean/p90 ms", "%16.1f", [](const RunReport& r) { return r.finish_mean_ms; });
  row("", "%16.1f", [](const RunReport& r) { return r.finish_ms.p90; });
  row("errors", "%16.0f", [](const RunReport& r) { return static_cast<double>(r.errors); });
  if (runs.front().second.has_engine_stats) {
    row("preemptions", "%16.0f", [](const RunReport& r) { return static_cast<double>(r.stats.preemptions); });
    row("prefix hit rate", "%16.3f", [](const RunReport& r) { return r.stats.prefix_hit_rate; });
    row("slot utilization", "%16.3f", [](const RunReport& r) { return r.stats.slot_utilization(); });
    row("compute-bound steps", "%16.3f", [](const RunReport& r) {
      return r.stats.costed_steps > 0
                 ? static_cast<double>(r.stats.compute_bound_steps) / static_cast<double>(r.stats.costed_steps)
                 : NAN;
    });
    if (runs.front().second.stats.grammar_rows > 0) {
      row("grammar ms/step", "%16.3f", [](const RunReport& r) {
        return r.stats.steps > 0 ? r.stats.grammar_ms / static_cast<double>(r.stats.steps) : 0.0;
      });
      row("grammar share of time", "%16.3f",
          [](const RunReport& r) { return r.duration_s > 0 ? r.stats.grammar_ms / (1000 * r.duration_s) : 0.0; });
    }
  }
  if (runs.size() == 2 && runs[1].second.output_tps > 0) {
    std::printf("%-22s%16.2fx\n", "output tps ratio", runs[0].second.output_tps / runs[1].second.output_tps);
  }
}

// The workload as OpenAI completion requests: the same prompts (token ids, BOS included, or
// their text), greedy, exact lengths through the `ignore_eos` extension (vLLM's name), streamed
// with a usage chunk so the server's token count is known.
std::vector<LoadRequest> http_requests(const Tokenizer& tok, const Workload& w, const std::string& model_name,
                                       bool text_prompts) {
  std::vector<LoadRequest> out;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const Request& r = w.requests[i];
    nlohmann::json body = {{"model", model_name}, {"max_tokens", r.max_tokens},
                           {"temperature", 0},    {"ignore_eos", r.ignore_eos},
                           {"stream", true},      {"stream_options", {{"include_usage", true}}}};
    if (text_prompts) {
      std::span<const TokenId> ids(r.prompt);
      if (!ids.empty() && ids.front() == tok.bos()) ids = ids.subspan(1);  // the server adds its own BOS
      body["prompt"] = tok.decode(ids);  // re-tokenized by the server, so lengths differ a little
    } else {
      body["prompt"] = r.prompt;
    }
    // Random byte-fallback tokens can decode to invalid UTF-8; JSON needs valid text (U+FFFD).
    out.push_back({body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), w.arrival_s[i]});
  }
  return out;
}

struct UrlRun {
  std::string url, api_key, model_name;
  int64_t concurrency = 0;
  bool text_prompts = false;
};

RunReport run_over_http(const Tokenizer& tok, const Workload& w, const UrlRun& u, const Slo& slo,
                        std::string* first_error) {
  LoadOptions o;
  o.endpoint = parse_http_url(u.url);
  o.api_key = u.api_key;
  o.concurrency = u.concurrency;
  const std::string model_name = u.model_name.empty() ? fetch_served_model(o) : u.model_name;
  std::fprintf(stderr, "[bench-serve] %s serves '%s'; %zu requests, at most %lld in flight...\n", u.url.c_str(),
               model_name.c_str(), w.requests.size(), static_cast<long long>(o.concurrency));
  const std::vector<LoadResult> results = run_http_load(o, http_requests(tok, w, model_name, u.text_prompts));
  std::vector<RequestTiming> timings;
  double end_s = 0;
  for (const LoadResult& r : results) {
    RequestTiming t;
    t.ok = r.ok;
    t.start_s = r.sent_s;
    t.token_times_s = r.chunk_times_s;
    // The usage chunk is the server's count; without one, one token per chunk is the best guess.
    t.output_tokens = r.completion_tokens >= 0 ? r.completion_tokens : static_cast<int64_t>(r.chunk_times_s.size());
    end_s = std::max(end_s, r.done_s);
    if (!r.ok && first_error->empty()) *first_error = r.error;
    timings.push_back(std::move(t));
  }
  return summarize(timings, end_s, slo);
}

struct BenchServeOptions {
  std::optional<std::string> model, tokenizer, url, json_schema, grammar, step_log;
  int64_t n_requests = 64, concurrency = 0;
  uint64_t seed = 0;
  std::string rate_text = "inf", input_len = "128:512", output_len = "64:256", policy = "continuous";
  std::string output_dist = "uniform";
  std::string goodput_text, api_key, model_name;
  double prefix_share = 0;
  bool compare = false, json = false, text_prompts = false;
  EngineFlags engine;  // -t, KV memory and type, batch limits, prefix caching: the same flags as serve
};

// The flags as given; nullopt when --help was printed.
std::optional<BenchServeOptions> parse_bench_serve_args(const Args& args) {
  BenchServeOptions o;
  o.engine.max_seqs = 16;
  ArgParser p("bench-serve",
              "Serving benchmark: Poisson arrivals, random lengths, continuous or static batching; offline on the "
              "engine, or with --url against a live server.");
  p.positional("MODEL", &o.model,
               "model file (GGUF, or llama2.c .bin with --tokenizer) or name (ORG/NAME, ollama:NAME; see run --help);\n"
               "default: the embedded demo model. "
               "With --url only its tokenizer is used, to build the workload");
  p.option("--tokenizer", &o.tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--requests", &o.n_requests, "N", "number of requests", 1, 1000000);
  p.option("--rate", &o.rate_text, "R|inf", "Poisson arrival rate in requests/s; inf = all at once");
  p.option("--input-len", &o.input_len, "MIN:MAX", "prompt tokens, uniform in [MIN, MAX]");
  p.option("--output-len", &o.output_len, "MIN:MAX", "generated tokens in [MIN, MAX], drawn by --output-dist");
  p.option("--output-dist", &o.output_dist, "D",
           "uniform | exponential (MIN plus an exponential with mean (MAX-MIN)/2, cut at MAX)");
  p.option("--prefix-share", &o.prefix_share, "F", "share of each prompt that is a common prefix", 0, 1);
  p.option("--policy", &o.policy, "P", "continuous | static");
  p.flag("--compare-policies", &o.compare, "run continuous and static on the same workload, side by side");
  o.engine.add_to(p);
  p.option("--seed", &o.seed, "S", "workload seed");
  p.option("--json-schema", &o.json_schema, "FILE",
           "offline: every output follows this JSON schema (sampled at temperature 1, seed + request index)");
  p.option("--grammar", &o.grammar, "FILE", "offline: every output follows this GBNF grammar (sampled likewise)");
  p.option("--goodput", &o.goodput_text, "ttft_ms:X,tpot_ms:Y",
           "objectives for goodput: requests/s that met all given");
  p.option("--url", &o.url, "URL",
           "benchmark the server at http://HOST:PORT over HTTP (streaming completions) instead");
  p.option("--concurrency", &o.concurrency, "C", "with --url: requests in flight at most (default: all)", 1, 4096);
  p.option("--api-key", &o.api_key, "KEY", "with --url: sent as Authorization: Bearer KEY");
  p.option("--model-name", &o.model_name, "NAME",
           "with --url: the request's model field (default: the server's first)");
  p.flag("--text-prompts", &o.text_prompts, "with --url: send prompts as text instead of token ids");
  p.option("--step-log", &o.step_log, "FILE",
           "offline: write one CSV line per engine step (rows, context, the step-time model's prediction and\n"
           "budget, the time it took)");
  p.flag("--json", &o.json, "print one JSON object");
  if (!p.parse(args)) return std::nullopt;
  return o;
}

double parse_rate(const std::string& text) {
  if (text == "inf") return INFINITY;
  double rate = 0;
  try {
    rate = std::stod(text);
  } catch (const std::exception&) {
    rate = -1;
  }
  if (!(rate > 0) || std::isinf(rate)) throw UsageError("--rate '" + text + "': expected a positive number or inf");
  return rate;
}

// What the flags ask for, checked before the model is read.
struct WorkloadSpec {
  double rate;
  Range in, out;
  OutputDist out_dist;
  Slo slo;
};

WorkloadSpec check_bench_serve_options(const BenchServeOptions& o) {
  const double rate = parse_rate(o.rate_text);
  if (o.policy != "continuous" && o.policy != "static") {
    throw UsageError("--policy '" + o.policy + "': choose continuous or static");
  }
  parse_max_step_ms(o.engine.max_step_ms);
  if (!parse_kv_type(o.engine.kv_type)) {  // engine_config() checks the rest once the model is read
    throw UsageError("unknown --kv-type '" + o.engine.kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  }
  const Range in = parse_range("--input-len", o.input_len), out = parse_range("--output-len", o.output_len);
  if (o.output_dist != "uniform" && o.output_dist != "exponential") {
    throw UsageError("--output-dist '" + o.output_dist + "': choose uniform or exponential");
  }
  const OutputDist out_dist = o.output_dist == "uniform" ? OutputDist::Uniform : OutputDist::Exponential;
  const Slo slo = parse_slo(o.goodput_text);
  if (o.url && o.compare) {
    throw UsageError("--compare-policies runs the engine offline; it does not combine with --url");
  }
  if (o.url) parse_http_url(*o.url);  // a malformed URL fails before the model is read
  if (o.url && (o.json_schema || o.grammar)) {
    throw UsageError("--json-schema and --grammar constrain the offline engine; a server takes them per request");
  }
  if (o.url && o.step_log)
    throw UsageError("--step-log traces the offline engine; a server's steps are on its web page");
  return {rate, in, out, out_dist, slo};
}

Workload workload_for(const BenchServeOptions& o, const WorkloadSpec& spec, const Tokenizer& tok) {
  return make_workload(tok, o.n_requests, spec.rate, spec.in, spec.out, spec.out_dist, o.prefix_share, o.seed);
}

// --url: the workload against a live server; exit code 1 when any request failed.
int bench_over_http(const BenchServeOptions& o, const WorkloadSpec& spec, const Tokenizer& tok) {
  const Workload w = workload_for(o, spec, tok);
  UrlRun u{*o.url, o.api_key, o.model_name, o.concurrency > 0 ? o.concurrency : o.n_requests, o.text_prompts};
  std::string first_error;
  const RunReport r = run_over_http(tok, w, u, spec.slo, &first_error);
  if (o.json) {
    nlohmann::json j;
    j["continuous"] = report_json(r);
    j["goodput"] = goodput_json(r, spec.slo);
    j["requests"] = o.n_requests;
    j["concurrency"] = u.concurrency;
    j["url"] = *o.url;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_table({{"http", r}});
  }
  if (r.errors > 0) {
    std::fprintf(stderr, "peregrine bench-serve: error: %lld of %lld requests failed; the first: %s\n",
                 static_cast<long long>(r.errors), static_cast<long long>(o.n_requests), first_error.c_str());
    return 1;
  }
  return 0;
}

using PolicyRuns = std::vector<std::pair<std::string, RunReport>>;

nlohmann::json offline_json(const PolicyRuns& runs, const EngineConfig& cfg, int64_t n_requests, const Slo& slo) {
  nlohmann::json j;
  for (const auto& [name, r] : runs) j[name] = report_json(r);
  j["goodput"] = goodput_json(runs.front().second, slo);
  j["requests"] = n_requests;
  j["max_seqs"] = cfg.scheduler.max_seqs;
  j["max_batched_tokens"] = cfg.scheduler.max_batched_tokens;
  j["kv_blocks"] = cfg.kv_blocks;
  j["prefix_caching"] = cfg.prefix_caching;
  if (runs.size() == 2 && runs[1].second.output_tps > 0) {
    j["output_tps_ratio"] = runs[0].second.output_tps / runs[1].second.output_tps;
  }
  return j;
}

// Offline: the workload on the engine, once per policy asked for; exit code 1 when any request
// failed.
// Under a distributed layout the other ranks load their shards and run the steps rank 0 sends.
int bench_offline(const BenchServeOptions& o, const WorkloadSpec& spec) {
  ModelHost host(o.engine.dist, "bench-serve", [&] { return open_model_arg(o.model, o.tokenizer); },
                 o.engine.backend.make_context());
  if (host.worker()) return host.serve_steps();
  Model& m = host.model();
  const Tokenizer tok = Tokenizer::from_metadata(m.file().meta, m.file().path);
  const ModelConfig& c = m.config();
  if (spec.in.hi + spec.out.hi > c.context_length) {
    throw UsageError("--input-len and --output-len maxima add up to more than the context length " +
                     std::to_string(c.context_length));
  }
  EngineConfig cfg = o.engine.engine_config(m, o.model, "[bench-serve] ");
  Workload w = workload_for(o, spec, tok);
  // One constraint for every request (its caches shared, as a server shares them for one schema).
  if (auto constraint = load_constraint(o.json_schema, o.grammar, tok)) {
    for (size_t i = 0; i < w.requests.size(); ++i) {
      w.requests[i].grammar = constraint;
      w.requests[i].sampling.temperature = 1.0f;
      w.requests[i].sampling.seed = o.seed + i;
    }
  }

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log(nullptr, &std::fclose);
  if (o.step_log) {
    step_log.reset(std::fopen(o.step_log->c_str(), "w"));
    if (!step_log) throw UsageError("--step-log: cannot write '" + *o.step_log + "'");
    std::fprintf(
        step_log.get(),
        "policy,step,end_s,decode_rows,prefill_tokens,context_tokens,attention_pairs,predicted_ms,budget_ms,ms\n");
  }
  PolicyRuns runs;
  const std::vector<std::string> policies =
      o.compare ? std::vector<std::string>{"continuous", "static"} : std::vector<std::string>{o.policy};
  for (const std::string& name : policies) {
    cfg.scheduler.policy = name == "static" ? SchedulePolicy::Static : SchedulePolicy::Continuous;
    std::fprintf(stderr, "[bench-serve] %s: %lld requests...\n", name.c_str(), static_cast<long long>(o.n_requests));
    runs.emplace_back(name, run_workload(host.runner(), tok, w, cfg, spec.slo, name, step_log.get()));
  }
  if (o.json) {
    std::printf("%s\n", offline_json(runs, cfg, o.n_requests, spec.slo).dump(2).c_str());
  } else {
    print_table(runs);
  }
  for (const auto& [name, r] : runs) {
    if (r.errors > 0) return 1;
  }
  return 0;
}

}  // namespace

int bench_serve_command(const Args& args) {
  const std::optional<BenchServeOptions> o = parse_bench_serve_args(args);
  if (!o) return 0;
  const WorkloadSpec spec = check_bench_serve_options(*o);
  o->engine.dist.check_spec(o->engine.spec);
  if (!o->url) return bench_offline(*o, spec);
  if (o->engine.dist.layout().distributed()) throw UsageError("--url measures a server; give --tp/--pp to that server");
  ModelFile mf = open_model_arg(o->model, o->tokenizer);
  const Tokenizer tok = Tokenizer::from_metadata(mf.meta, mf.path);
  return bench_over_http(*o, spec, tok);
}

}  // namespace peregrine::cli
