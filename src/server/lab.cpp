// The lab's front (lab.h): what it offers, the arithmetic experiments (KV bytes per head layout,
// the plan form), and the dispatch of runs to their files.
#include "server/lab.h"

#include <algorithm>
#include <cmath>

#include "dist/layout.h"
#include "dist/plan.h"
#include "dist/plan_json.h"
#include "kv/kv_type.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/lab_run.h"
#include "util/error.h"

namespace peregrine::server {
namespace {

using nlohmann::json;

// The chapter's example: a 7B-class model (32 layers, 32 query heads of 128) at f16 holding one
// 8192-token sequence: 4 GiB of K/V with MHA, 1 GiB with 8 KV heads (GQA), 128 MiB with one (MQA).
constexpr int64_t kExampleLayers = 32, kExampleHeads = 32, kExampleHeadDim = 128, kExampleContext = 8192;

double kv_bytes_per_token(int64_t layers, int64_t kv_heads, int64_t head_dim, double bytes_per_value) {
  return 2.0 * static_cast<double>(layers * kv_heads * head_dim) * bytes_per_value;
}

// MHA, GQA and MQA of one shape: KV heads, bytes per token and for context x batch, and (when the
// server's KV memory is given) the longest context of `batch` sequences it holds.
json head_layouts(int64_t layers, int64_t heads, int64_t gqa_kv_heads, int64_t head_dim, double bytes_per_value,
                  int64_t context, int64_t batch, double kv_memory_bytes) {
  json out = json::array();
  const std::pair<const char*, int64_t> layouts[] = {{"MHA", heads}, {"GQA", gqa_kv_heads}, {"MQA", 1}};
  for (auto [name, kv_heads] : layouts) {
    const double per_token = kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value);
    json j = {{"layout", name},
              {"kv_heads", kv_heads},
              {"bytes_per_token", per_token},
              {"bytes", per_token * static_cast<double>(context * batch)}};
    if (kv_memory_bytes > 0) {
      j["longest_context"] =
          static_cast<int64_t>(std::floor(kv_memory_bytes / (per_token * static_cast<double>(batch))));
    }
    out.push_back(j);
  }
  return out;
}

// A GQA layout to show beside MHA and MQA: the model's own when it is one, else a quarter of the
// query heads (rounded down to a divisor).
int64_t gqa_heads_of(const ModelConfig& c) {
  if (c.n_kv_heads > 1 && c.n_kv_heads < c.n_heads) return c.n_kv_heads;
  int64_t g = std::max<int64_t>(1, c.n_heads / 4);
  while (c.n_heads % g != 0) --g;
  return g;
}

std::string string_field(const json& body, const char* name, const std::string& fallback) {
  return read_string(body, name).value_or(fallback);
}

}  // namespace

bool Lab::is_run(std::string_view e) {
  return e == "matmul" || e == "steps" || e == "kv-cache" || e == "batching" || e == "speculative" || e == "attention";
}

json Lab::info(ServingModel& model) const {
  const ModelConfig& c = model.model().config();
  const EngineConfig& e = model.engine().config();
  json proposers = json::array();
  for (const std::string& p : options_.proposers) proposers.push_back(p);
  return {{"model", model.name()},
          {"layers", c.n_layers},
          {"heads", c.n_heads},
          {"kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"context_length", c.context_length},
          {"kv_type", kv_type_name(e.kv_type)},
          {"kv_tokens", e.kv_blocks * e.block_size},
          {"engine_runs", model.local_model() != nullptr},
          {"proposers", proposers},
          {"roof", options_.roof ? json{{"bandwidth", options_.roof->bandwidth},
                                        {"peak_f32", options_.roof->peak_f32},
                                        {"peak_int8", options_.roof->peak_int8}}
                                 : json(nullptr)},
          {"limits", {{"step_tokens", kLabStepTokens}, {"kv_tokens", kMaxLabKvTokens}, {"run_seconds", kRunSeconds}}},
          {"plan",
           {{"devices", dist::plan_device_names()},
            {"links", dist::plan_link_names()},
            {"presets", dist::plan_model_names()}}}};
}

json Lab::kv_sizes(ServingModel& model, const json& body) const {
  const int64_t context = lab::int_field(body, "context", 1, int64_t{1} << 24, model.context_length());
  const int64_t batch = lab::int_field(body, "batch", 1, 1 << 16, 1);
  const ModelConfig& c = model.model().config();
  const EngineConfig& e = model.engine().config();
  const double bpv = kv_bytes_per_value(e.kv_type, c.head_dim);
  const double kv_memory =
      kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim, bpv) * static_cast<double>(e.kv_blocks * e.block_size);
  return {
      {"context", context},
      {"batch", batch},
      {"kv_type", kv_type_name(e.kv_type)},
      {"server_kv_bytes", kv_memory},
      {"server_kv_tokens", e.kv_blocks * e.block_size},
      {"model",
       {{"name", model.name()},
        {"layers", c.n_layers},
        {"heads", c.n_heads},
        {"kv_heads", c.n_kv_heads},
        {"head_dim", c.head_dim},
        {"layouts", head_layouts(c.n_layers, c.n_heads, gqa_heads_of(c), c.head_dim, bpv, context, batch, kv_memory)}}},
      {"example",
       {{"name", "7B-class: 32 layers, 32 heads of 128, f16, 8192 tokens"},
        {"layers", kExampleLayers},
        {"heads", kExampleHeads},
        {"head_dim", kExampleHeadDim},
        {"context", kExampleContext},
        {"layouts", head_layouts(kExampleLayers, kExampleHeads, 8, kExampleHeadDim, 2.0, kExampleContext, 1, 0)}}}};
}

json Lab::plan(ServingModel& model, const json& body) const {
  const std::string preset = string_field(body, "model", "loaded");
  dist::PlanModel m;
  if (preset == "loaded") {
    m = dist::plan_model_of(model.model().file(), model.name());
  } else if (auto p = dist::plan_model_preset(preset)) {
    m = *p;
  } else {
    throw invalid_request("'model': 'loaded' or one of " + dist::plan_model_names(), "model");
  }
  const auto device = dist::plan_device(string_field(body, "device", "h100"));
  if (!device) throw invalid_request("'device': one of " + dist::plan_device_names(), "device");
  const auto link = dist::plan_link(string_field(body, "link", "nvlink"));
  if (!link) throw invalid_request("'link': one of " + dist::plan_link_names(), "link");
  dist::PlanOptions o;
  o.seq_len = lab::int_field(body, "seq_len", 0, int64_t{1} << 24, 0);
  const std::optional<std::string> kv = read_string(body, "kv_type");
  if (kv) {
    const auto t = parse_kv_type(*kv);
    if (!t) throw invalid_request("'kv_type': one of " + std::string(kv_type_choices()), "kv_type");
    o.kv_type = *t;
  }
  const dist::PlanLayout layout{static_cast<int>(lab::int_field(body, "tp", 1, 64, 1)),
                                static_cast<int>(lab::int_field(body, "pp", 1, 64, 1)),
                                static_cast<int>(lab::int_field(body, "ep", 1, 64, 1))};
  const int max_devices = static_cast<int>(lab::int_field(body, "max_devices", 1, 64, 8));
  json out = {{"model",
               {{"name", m.name},
                {"params", m.params},
                {"weight_bytes", m.params * m.bytes_per_param},
                {"layers", m.layers},
                {"kv_heads", m.kv_heads},
                {"head_dim", m.head_dim},
                {"context", m.context}}},
              {"device",
               {{"name", device->name},
                {"memory_bytes", device->memory_bytes},
                {"bandwidth", device->bandwidth},
                {"flops", device->flops}}},
              {"link", {{"name", link->name}, {"bandwidth", link->bandwidth}, {"latency", link->latency}}}};
  if (auto disagg = read_string(body, "disaggregate"); disagg && !disagg->empty()) {
    dist::Layout pools;
    try {
      dist::parse_disaggregate(*disagg, pools);
    } catch (const UsageError& e) {
      throw invalid_request(std::string("'disaggregate': ") + e.what(), "disaggregate");
    }
    out["prefill_pool"] = dist::plan_figures_json(dist::plan_layout(m, *device, *link, {pools.prefill_ranks, 1, 1}, o));
    out["decode_pool"] = dist::plan_figures_json(dist::plan_layout(m, *device, *link, {pools.decode_ranks, 1, 1}, o));
  } else {
    out["layout"] = dist::plan_figures_json(dist::plan_layout(m, *device, *link, layout, o));
  }
  json fitting = json::array();
  for (const dist::PlanLayout& l : dist::candidate_layouts(m, max_devices)) {
    const dist::PlanFigures f = dist::plan_layout(m, *device, *link, l, o);
    if (f.fits) fitting.push_back(dist::plan_figures_json(f));
  }
  out["layouts_that_fit"] = fitting;
  return out;
}

LabJob Lab::prepare(std::string_view experiment, ServingModel& model, const json& body) const {
  const lab::Context c{model, options_, stopping_};
  if (experiment == "matmul") return lab::matmul(c, body);
  if (experiment == "steps") return lab::steps(c, body);
  if (experiment == "kv-cache") return lab::kv_cache(c, body);
  if (experiment == "batching") return lab::batching(c, body);
  if (experiment == "speculative") return lab::speculative(c, body);
  if (experiment == "attention") return lab::attention(c, body);
  throw not_found("/v1/lab/" + std::string(experiment));
}

}  // namespace peregrine::server
