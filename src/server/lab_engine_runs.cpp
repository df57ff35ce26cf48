// Figures 10.2, 10.4 and 10.5 as runs of the lab's own EngineCore on the serving engine's thread
// (lab_run.h): a prefill chunk and a decode step placed on the roofline, generation with and
// without the KV cache, and one workload under static and continuous batching.
#include <algorithm>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/lab_run.h"

namespace peregrine::server::lab {
namespace {

using nlohmann::json;

json run_flags(const LabRun& run) {
  return {{"under_load", run.under_load}, {"truncated", run.truncated}, {"wall_ms", run.wall_ms}};
}

// ---- 10.4: one prefill chunk and one decode step on the roofline ----

json steps_run(const Context& c, std::vector<TokenId> prompt) {
  Model& model = local_model(c.model);
  Engine& serving = c.model.engine();
  EngineCore core(model, nullptr, lab_config(serving, static_cast<int64_t>(prompt.size()) + 2, 1));
  core.add_request(lab_request(std::move(prompt), 2));
  const LabRun run = run_interleaved(serving, core, c.stopping, Lab::kRunSeconds);
  std::vector<StepSummary> summaries;
  std::vector<SlotCell> cells;
  core.trace().copy_since(0, summaries, cells);
  const StepCostShape cost = StepCostShape::of(model, core.config().kv_type);
  json points = json::array();
  for (size_t i = 0; i < summaries.size() && i < run.steps.size(); ++i) {
    const StepSummary& s = summaries[i];
    const double ms = run.steps[i].ms, flops = cost.flops(s), bytes = cost.bytes(s);
    json p = {{"phase", s.prefill_tokens > 0 ? "prefill" : "decode"},
              {"tokens", s.prefill_tokens + s.decode_rows},
              {"ms", ms},
              {"flops", flops},
              {"bytes", bytes},
              {"intensity", flops / bytes},
              {"gflops", flops / (ms / 1e3) / 1e9}};
    if (c.options.roof) {
      const MachineRoof& r = *c.options.roof;
      p["roof_gflops"] = std::min(r.peak_int8 > 0 ? r.peak_int8 : r.peak_f32, r.bandwidth * flops / bytes) / 1e9;
      p["bound"] = r.bandwidth * flops / bytes < (r.peak_int8 > 0 ? r.peak_int8 : r.peak_f32) ? "memory" : "compute";
    }
    points.push_back(p);
  }
  json out = run_flags(run);
  out["points"] = points;
  return out;
}

// ---- 10.2: with and without the KV cache ----

struct TokenTimes {
  std::vector<TokenId> tokens;
  json per_token = json::array();  // [{position, ms}]
  double total_ms = 0, total_cpu_ms = 0;
  LabRun run;
};

TokenTimes generate(const Context& c, const std::vector<TokenId>& prompt, int64_t n, bool recompute) {
  Engine& serving = c.model.engine();
  EngineConfig config = lab_config(serving, static_cast<int64_t>(prompt.size()) + n, 1);
  config.recompute_kv = recompute;
  EngineCore core(local_model(c.model), nullptr, config);
  core.add_request(lab_request(prompt, n));
  TokenTimes t;
  t.run = run_interleaved(serving, core, c.stopping, Lab::kRunSeconds / 2);
  double since = 0, cpu_since = 0;
  for (const LabStep& s : t.run.steps) {
    since += s.ms;
    cpu_since += s.cpu_ms;
    t.total_ms += s.ms;
    t.total_cpu_ms += s.cpu_ms;
    for (const RequestEvent& ev : s.events) {
      for (const GeneratedToken& g : ev.tokens) {
        t.per_token.push_back({{"position", static_cast<int64_t>(prompt.size() + t.tokens.size())},
                               {"ms", since},
                               {"cpu_ms", cpu_since}});
        t.tokens.push_back(g.token);
        since = cpu_since = 0;
      }
    }
  }
  return t;
}

json kv_cache_run(const Context& c, const std::vector<TokenId>& prompt, int64_t n) {
  const TokenTimes cached = generate(c, prompt, n, false);
  const TokenTimes uncached = generate(c, prompt, n, true);
  auto side = [](const TokenTimes& t) {
    json j = run_flags(t.run);
    j["per_token"] = t.per_token;
    j["total_ms"] = t.total_ms;
    j["total_cpu_ms"] = t.total_cpu_ms;
    j["tokens"] = t.tokens;
    return j;
  };
  return {{"prompt_tokens", prompt.size()},
          {"tokens", n},
          {"with_cache", side(cached)},
          {"without_cache", side(uncached)},
          {"identical", cached.tokens == uncached.tokens && static_cast<int64_t>(cached.tokens.size()) == n},
          {"text", c.model.tokenizer().decode(cached.tokens)}};
}

// ---- 10.5: static against continuous batching ----

json batching_run(const Context& c, const std::vector<TokenId>& prompt, const std::vector<int64_t>& outputs,
                  int64_t slots, SchedulePolicy policy) {
  Engine& serving = c.model.engine();
  int64_t total = 0;
  for (int64_t o : outputs) total += static_cast<int64_t>(prompt.size()) + o;
  EngineConfig config = lab_config(serving, total, slots);
  config.scheduler.policy = policy;
  EngineCore core(local_model(c.model), nullptr, config);
  std::vector<RequestId> ids;
  for (int64_t o : outputs) ids.push_back(core.add_request(lab_request(prompt, o)));
  const LabRun run = run_interleaved(serving, core, c.stopping, Lab::kRunSeconds / 2);
  std::vector<StepSummary> summaries;
  std::vector<SlotCell> cells;
  core.trace().copy_since(0, summaries, cells);
  auto index_of = [&](RequestId id) {
    return static_cast<int64_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
  };
  json grid = json::array();  // [step][slot]: [request index, "p" | "d"] or null
  for (size_t i = 0; i < summaries.size(); ++i) {
    json row = json::array();
    for (int64_t s = 0; s < slots; ++s) {
      const SlotCell& cell = cells[i * StepTrace::kSlots + static_cast<size_t>(s)];
      row.push_back(cell.phase == SlotPhase::Idle
                        ? json(nullptr)
                        : json::array({index_of(cell.request), cell.phase == SlotPhase::Prefill ? "p" : "d"}));
    }
    grid.push_back(row);
  }
  json finish = json::array();
  for (size_t i = 0; i < ids.size(); ++i) finish.push_back(nullptr);
  double elapsed = 0;
  int64_t busy = 0;
  for (size_t st = 0; st < run.steps.size(); ++st) {
    elapsed += run.steps[st].ms;
    for (const RequestEvent& ev : run.steps[st].events) {
      if (ev.finish == RequestFinish::None) continue;
      finish[static_cast<size_t>(index_of(ev.id))] = {{"step", st + 1}, {"ms", elapsed}};
    }
  }
  for (const SlotCell& cell : cells) busy += cell.phase != SlotPhase::Idle ? 1 : 0;
  json out = run_flags(run);
  out["policy"] = policy == SchedulePolicy::Static ? "static" : "continuous";
  out["grid"] = grid;
  out["finish"] = finish;
  out["steps"] = run.steps.size();
  out["total_ms"] = elapsed;
  out["slot_use"] = summaries.empty() ? 0.0 : static_cast<double>(busy) / static_cast<double>(summaries.size() * slots);
  return out;
}

}  // namespace

LabJob steps(const Context& c, const nlohmann::json& body) {
  local_model(c.model);
  const int64_t most = std::min<int64_t>(Lab::kLabStepTokens, c.model.context_length() - 2);
  const int64_t n = int_field(body, "prompt_tokens", 2, most, std::min<int64_t>(most, 48));
  std::vector<TokenId> prompt = prompt_of_length(prompt_field(c.model, body, n), n);
  return [c, prompt = std::move(prompt)] { return steps_run(c, prompt); };
}

LabJob kv_cache(const Context& c, const nlohmann::json& body) {
  local_model(c.model);
  const int64_t room = std::min<int64_t>(512, c.model.context_length());
  std::vector<TokenId> prompt = prompt_field(c.model, body, room / 2);
  const int64_t n =
      int_field(body, "tokens", 1, std::min<int64_t>(128, room - static_cast<int64_t>(prompt.size())), 48);
  return [c, prompt = std::move(prompt), n] { return kv_cache_run(c, prompt, n); };
}

LabJob batching(const Context& c, const nlohmann::json& body) {
  local_model(c.model);
  std::vector<int64_t> outputs = {24, 4, 12, 6, 18, 3};
  if (auto it = body.find("outputs"); it != body.end() && !it->is_null()) {
    if (!it->is_array() || it->size() < 2 || it->size() > 12) {
      throw invalid_request("'outputs' is a list of 2 to 12 output lengths", "outputs");
    }
    outputs.clear();
    for (const json& v : *it) outputs.push_back(as_int(v, "outputs", 1, 64));
  }
  int64_t sum = 0;
  for (int64_t o : outputs) sum += o;
  if (sum > 200) throw invalid_request("'outputs' add up to at most 200 tokens", "outputs");
  const int64_t slots = int_field(body, "slots", 1, 8, 3);
  std::vector<TokenId> prompt = prompt_field(c.model, body, 32);
  return [c, prompt = std::move(prompt), outputs, slots] {
    json out = {{"outputs", outputs}, {"slots", slots}, {"prompt_tokens", prompt.size()}};
    out["static"] = batching_run(c, prompt, outputs, slots, SchedulePolicy::Static);
    out["continuous"] = batching_run(c, prompt, outputs, slots, SchedulePolicy::Continuous);
    return out;
  };
}

}  // namespace peregrine::server::lab
