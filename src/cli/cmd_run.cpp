// `peregrine run`: one prompt in, streamed text out, with a timing summary on stderr. The
// request runs through the serving engine (EngineCore), the same path `serve` and `bench` take:
// chunked prefill, then one decode step per token.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/commands.h"
#include "cli/dist_flags.h"
#include "cli/model_host.h"
#include "cli/model_loading.h"
#include "cli/spec_flags.h"
#include "engine/engine_core.h"
#include "kv/kv_type.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

struct RunOptions {
  std::optional<std::string> model, tokenizer, weight_type;
  std::string prompt, kv_type = "f16";
  int64_t max_tokens = 128, top_k = 40, n_logprobs = 0;
  double temperature = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, freq_penalty = 0, presence_penalty = 0;
  uint64_t seed = 0;
  bool no_kv_cache = false, json = false, parse_special = false, ignore_eos = false;
  BackendFlags backend;
  SpecFlags spec;
  DistFlags dist;
};

// Returns false after --help.
bool parse_run_args(const Args& args, RunOptions& o) {
  ArgParser p("run", "Generate text from a prompt. The text streams to stdout; a summary (prompt\n"
                     "tokens, time to first token, decode tokens/s) goes to stderr.");
  p.positional("MODEL", &o.model, kModelHelp);
  p.option("-p,--prompt", &o.prompt, "TEXT", "prompt; empty means BOS alone");
  p.option("-n,--max-tokens", &o.max_tokens, "N", "tokens to generate at most", 1, 1 << 24);
  p.option("--temperature,--temp", &o.temperature, "T", "sampling temperature; 0 = greedy", 0, 100);
  p.option("--top-k", &o.top_k, "K", "keep the K most likely tokens; 0 = off", 0, 1 << 24);
  p.option("--top-p", &o.top_p, "P", "nucleus sampling: smallest set with mass >= P; 1 = off", 0, 1);
  p.option("--min-p", &o.min_p, "P", "drop tokens below P * p(best); 0 = off", 0, 1);
  p.option("--repeat-penalty", &o.repeat_penalty, "R", "repetition penalty; 1 = off", 0, 100);
  p.option("--frequency-penalty", &o.freq_penalty, "F", "OpenAI frequency penalty", -2, 2);
  p.option("--presence-penalty", &o.presence_penalty, "F", "OpenAI presence penalty", -2, 2);
  p.option("--seed", &o.seed, "S", "random seed: the same seed gives the same text");
  p.option("--logprobs", &o.n_logprobs, "N", "report the top-N alternatives per token (--json)", 0, 20);
  p.option("--tokenizer", &o.tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--type", &o.weight_type, "TYPE", kLoadTypeHelp);
  p.option("--kv-type", &o.kv_type, "TYPE", "KV cache element type: " + std::string(kv_type_choices()));
  p.flag("--no-kv-cache", &o.no_kv_cache, "recompute the whole prefix at every step (slow; same tokens)");
  p.flag("--parse-special", &o.parse_special, "turn special-token text in the prompt into tokens");
  p.flag("--ignore-eos", &o.ignore_eos, "keep generating past end-of-generation tokens");
  p.flag("--json", &o.json, "print one JSON object at the end instead of streaming text");
  o.backend.add_to(p);
  o.spec.add_to(p);
  o.dist.add_to(p);
  return p.parse(args);
}

Request make_request(const RunOptions& o, std::vector<TokenId> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = o.max_tokens;
  r.ignore_eos = o.ignore_eos;
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(o.temperature);
  s.top_k = static_cast<int32_t>(o.top_k);
  s.top_p = static_cast<float>(o.top_p);
  s.min_p = static_cast<float>(o.min_p);
  s.repetition_penalty = static_cast<float>(o.repeat_penalty);
  s.frequency_penalty = static_cast<float>(o.freq_penalty);
  s.presence_penalty = static_cast<float>(o.presence_penalty);
  s.seed = o.seed;
  s.n_logprobs = static_cast<int32_t>(o.n_logprobs);
  return r;
}

// One sequence alone: a cache that holds its whole context (plus one block for copy-on-write),
// prompt chunks of 512 tokens.
EngineConfig single_request_engine(const RunOptions& o, const ModelConfig& c, int64_t prompt_len) {
  EngineConfig e;
  const std::optional<KvType> kv = parse_kv_type(o.kv_type);
  if (!kv) throw UsageError("unknown --kv-type '" + o.kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  e.kv_type = *kv;
  const int64_t limit = std::min(c.context_length, prompt_len + o.max_tokens);
  e.kv_blocks = (limit + e.block_size - 1) / e.block_size + 1;
  e.prefix_caching = false;
  e.scheduler.max_seqs = 1;
  e.scheduler.max_batched_tokens = 512;
  e.recompute_kv = o.no_kv_cache;
  return e;
}

struct RunResult {
  std::vector<GeneratedToken> tokens;
  std::string text;
  RequestFinish finish = RequestFinish::None;
  std::string error;
  double ttft_ms = 0;    // from the start to the first generated token (the prefill)
  double decode_ms = 0;  // from the first generated token to the last
  double decode_tokens_per_s() const {
    // The first token comes from prefill; the decode rate counts the tokens after it.
    return tokens.size() < 2 || decode_ms <= 0 ? 0 : static_cast<double>(tokens.size() - 1) / (decode_ms / 1000.0);
  }
};

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Steps the engine until the request ends, streaming each event's text to `stream` (if set).
RunResult drive(EngineCore& core, Request request, bool stream) {
  RunResult r;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point first = t0, last = t0;
  core.add_request(std::move(request), [&](const RequestEvent& ev) {
    const Clock::time_point now = Clock::now();
    if (!ev.tokens.empty()) {
      if (r.tokens.empty()) first = now;
      last = now;
      r.tokens.insert(r.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    }
    r.text += ev.text;
    if (stream && !ev.text.empty()) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    if (ev.finish != RequestFinish::None) {
      r.finish = ev.finish;
      r.error = ev.error;
    }
  });
  while (core.has_work()) core.step();
  r.ttft_ms = ms_between(t0, first);
  r.decode_ms = ms_between(first, last);
  return r;
}

// The speculation figures of the chapter: tokens produced, target passes, draft passes, and the
// target passes plain decoding would have taken (one per token after the first).
nlohmann::json spec_json(const RunOptions& o, const EngineStats& st, const RunResult& r) {
  const double proposed = static_cast<double>(st.draft_tokens), accepted = static_cast<double>(st.accepted_tokens);
  const auto decode_passes = static_cast<double>(std::max<int64_t>(1, st.decode_rows - 1));
  return {{"proposer", o.spec.proposer_name()},
          {"k", o.spec.tokens},
          {"target_passes", st.steps},
          {"draft_passes", st.draft_passes},
          {"proposed", st.draft_tokens},
          {"accepted", st.accepted_tokens},
          {"acceptance_rate", proposed > 0 ? accepted / proposed : 0.0},
          {"tokens_per_target_pass", r.tokens.size() > 1 ? static_cast<double>(r.tokens.size() - 1) / decode_passes : 0.0},
          {"plain_target_passes", static_cast<int64_t>(r.tokens.size())}};
}

void print_json(const RunOptions& o, const std::vector<TokenId>& prompt, const RunResult& r, const EngineStats& st) {
  nlohmann::json out;
  out["prompt_tokens"] = prompt;
  nlohmann::json ids = nlohmann::json::array();
  for (const GeneratedToken& t : r.tokens) ids.push_back(t.token);
  out["tokens"] = ids;
  out["text"] = r.text;
  out["finish_reason"] = request_finish_name(r.finish);
  out["prompt_ms"] = r.ttft_ms;
  out["ttft_ms"] = r.ttft_ms;
  out["decode_tokens_per_s"] = r.decode_tokens_per_s();
  if (o.spec.enabled()) out["spec"] = spec_json(o, st, r);
  if (o.n_logprobs > 0) {
    nlohmann::json lp = nlohmann::json::array();
    for (const GeneratedToken& t : r.tokens) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& alt : t.top_logprobs) top.push_back({{"token", alt.token}, {"logprob", alt.logprob}});
      lp.push_back({{"token", t.token}, {"logprob", t.logprob}, {"top", top}});
    }
    out["logprobs"] = lp;
  }
  // Invalid UTF-8 cannot occur (the stream decoder replaces it), but never crash on output.
  std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_summary(const RunOptions& o, size_t prompt_tokens, const RunResult& r, const EngineStats& st) {
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr,
               "\n[peregrine] prompt tokens: %zu  time to first token: %.1f ms  generated: %zu tokens (%s)  "
               "decode: %.1f tokens/s%s\n",
               prompt_tokens, r.ttft_ms, r.tokens.size(), request_finish_name(r.finish), r.decode_tokens_per_s(),
               o.no_kv_cache ? "  (no KV cache: whole prefix recomputed per token)" : "");
  if (o.spec.enabled()) {
    const nlohmann::json s = spec_json(o, st, r);
    std::fprintf(stderr,
                 "[peregrine] speculation (%s, k=%lld): %lld of %lld proposals accepted (%.0f%%), %.2f tokens per "
                 "target pass, %lld draft passes\n",
                 s["proposer"].get<std::string>().c_str(), static_cast<long long>(o.spec.tokens),
                 static_cast<long long>(st.accepted_tokens), static_cast<long long>(st.draft_tokens),
                 100.0 * s["acceptance_rate"].get<double>(), s["tokens_per_target_pass"].get<double>(),
                 static_cast<long long>(st.draft_passes));
  }
}

}  // namespace

int run_command(const Args& args) {
  RunOptions o;
  if (!parse_run_args(args, o)) return 0;

  o.dist.check_spec(o.spec);
  const std::optional<QuantScheme> load_type = parse_weight_type(o.weight_type);
  ModelHost host(o.dist, "run", [&] { return open_model_arg(o.model, o.tokenizer, load_type); },
                 o.backend.make_context());
  if (host.worker()) return host.serve_steps();
  Model& m = host.model();
  const Tokenizer tok = Tokenizer::from_metadata(m.file().meta, m.file().path);

  std::vector<TokenId> ids = tok.encode(o.prompt, true, o.parse_special);
  if (ids.empty()) {
    if (tok.bos() < 0) throw UsageError("empty prompt and the model has no BOS token");
    ids.push_back(tok.bos());
  }
  if (static_cast<int64_t>(ids.size()) >= m.config().context_length) {
    throw UsageError("the prompt has " + std::to_string(ids.size()) +
                     " tokens, which does not leave room to generate within the context length " +
                     std::to_string(m.config().context_length));
  }
  EngineConfig config = single_request_engine(o, m.config(), static_cast<int64_t>(ids.size()));
  o.spec.apply(config, o.spec.make_proposer(m, o.model, config.kv_blocks * config.block_size));
  EngineCore core(host.runner(), &tok, config);
  if (!o.json) {
    // Echo the prompt, then stream: text appears as soon as each character is complete.
    std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
    std::fflush(stdout);
  }
  const RunResult r = drive(core, make_request(o, ids), !o.json);
  if (r.finish == RequestFinish::Error) throw UsageError(r.error);
  if (o.json) {
    print_json(o, ids, r, core.stats());
  } else {
    print_summary(o, ids.size(), r, core.stats());
  }
  return 0;
}

}  // namespace peregrine::cli
