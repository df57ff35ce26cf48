#include "server/engine_view.h"

#include <algorithm>
#include <chrono>

#include "model/weight_census.h"

namespace peregrine::server {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const char* phase_code(SlotPhase p) { return p == SlotPhase::Prefill ? "p" : "d"; }

// [[slot, request, "p" | "d", rows], ...] for the busy slots of one step.
nlohmann::json busy_slots(std::span<const SlotCell> cells) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < cells.size(); ++i) {
    const SlotCell& c = cells[i];
    if (c.phase == SlotPhase::Idle) continue;
    out.push_back({i, c.request, phase_code(c.phase), c.tokens});
  }
  return out;
}

}  // namespace

StepCostShape StepCostShape::of(const Model& model, KvType kv_type) {
  const ModelConfig& c = model.config();
  const WeightCensus census = weight_census(model.file(), c);
  StepCostShape s;
  s.flops_per_row = 2.0 * census.active_params();
  s.weight_bytes = census.active_bytes();
  s.kv_bytes_per_position = c.kv_bytes_per_token(kv_bytes_per_value(kv_type, c.head_dim));
  s.flops_per_pair = 4.0 * static_cast<double>(c.n_layers * c.n_heads * c.head_dim);
  return s;
}

double StepCostShape::flops(const StepSummary& s) const {
  return flops_per_row * static_cast<double>(s.decode_rows + s.prefill_tokens) +
         flops_per_pair * static_cast<double>(s.attention_pairs);
}

double StepCostShape::bytes(const StepSummary& s) const {
  return weight_bytes + kv_bytes_per_position * static_cast<double>(s.context_tokens);
}

EngineViewer::EngineViewer(ServingModel& model, const Metrics& metrics, const std::optional<MachineRoof>& roof)
    : model_(model),
      metrics_(metrics),
      roof_(roof),
      cost_(StepCostShape::of(model.model(), model.engine().config().kv_type)) {}

nlohmann::json EngineViewer::frame() {
  Engine& engine = model_.engine();
  const EngineStats st = engine.stats();
  const double t = now_s();
  const int64_t newest = engine.trace().copy_since(last_step_, steps_, cells_);
  const bool first = last_step_ == 0 && n_samples_ == 0;
  last_step_ = newest;

  // Rates over the frames of the last ~2 s (the oldest sample kept).
  if (n_samples_ == samples_.size()) std::rotate(samples_.begin(), samples_.begin() + 1, samples_.end());
  n_samples_ = std::min(n_samples_ + 1, samples_.size());
  samples_[n_samples_ - 1] = {t, st.generated_tokens, st.computed_tokens};
  const Sample& old = samples_[0];
  const double span = t - old.t;
  const double tokens_per_s = span > 0 ? static_cast<double>(st.generated_tokens - old.generated) / span : 0;
  const double computed_per_s = span > 0 ? static_cast<double>(st.computed_tokens - old.computed) / span : 0;

  nlohmann::json steps = nlohmann::json::array();
  for (size_t i = 0; i < steps_.size(); ++i) {
    const StepSummary& s = steps_[i];
    const double flops = cost_.flops(s), bytes = cost_.bytes(s);
    steps.push_back({{"step", s.step},
                     {"t", s.end_s},
                     {"ms", s.ms},
                     {"decode_rows", s.decode_rows},
                     {"prefill_tokens", s.prefill_tokens},
                     {"unslotted", s.unslotted},
                     {"intensity", bytes > 0 ? flops / bytes : 0},
                     {"gflops", s.ms > 0 ? flops / (s.ms * 1e6) : 0},
                     {"slots", busy_slots(std::span(cells_).subspan(i * StepTrace::kSlots, StepTrace::kSlots))}});
  }
  const RecentLatency lat = metrics_.recent_latency();
  nlohmann::json frame = {
      {"model", model_.name()},
      {"step", newest},
      {"running", st.running},
      {"waiting", st.waiting},
      {"finished", st.finished},
      {"max_seqs", st.max_seqs},
      {"slots", std::min<int64_t>(st.max_seqs, StepTrace::kSlots)},
      {"kv",
       {{"total", st.kv_blocks_total},
        {"used", st.kv_blocks_used},
        {"free", st.kv_blocks_free},
        {"cached", std::max<int64_t>(0, st.kv_blocks_total - st.kv_blocks_used - st.kv_blocks_free)},
        {"type", kv_type_name(engine.config().kv_type)},
        {"bytes_per_token", cost_.kv_bytes_per_position}}},
      {"prefix",
       {{"queried_tokens", st.prefix_queried_tokens},
        {"hit_tokens", st.prefix_hit_tokens},
        {"hit_rate", st.prefix_hit_rate}}},
      {"tokens_per_s", tokens_per_s},
      {"computed_tokens_per_s", computed_per_s},
      {"latency",
       {{"ttft_ms_p50", lat.ttft_p50 * 1e3},
        {"ttft_ms_p90", lat.ttft_p90 * 1e3},
        {"itl_ms_p50", lat.itl_p50 * 1e3},
        {"itl_ms_p90", lat.itl_p90 * 1e3},
        {"ttft_samples", lat.ttft_samples},
        {"itl_samples", lat.itl_samples}}},
      {"steps", std::move(steps)},
  };
  if (first) {
    nlohmann::json roof = nullptr;
    if (roof_) {
      roof = {{"bandwidth_gbps", roof_->bandwidth / 1e9},
              {"peak_gflops_f32", roof_->peak_f32 / 1e9},
              {"peak_gops_int8", roof_->peak_int8 / 1e9}};
    }
    frame["roof"] = std::move(roof);
    frame["step_weight_bytes"] = cost_.weight_bytes;
  }
  return frame;
}

}  // namespace peregrine::server
