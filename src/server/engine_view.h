#pragma once
// What the web page's live view shows, one frame at a time (GET /v1/engine/events, docs/api.md):
// requests running and waiting, KV blocks, prefix-cache hits, token rates, recent TTFT and ITL,
// and the steps run since the viewer's last frame, each with its batch slots (StepTrace) and its
// place on this machine's roofline.
//
// Each viewer has its own EngineViewer (the steps it has not seen yet); a frame costs a copy of
// the engine's counters and of at most StepTrace::kSteps steps, and the buffers it reuses never
// grow beyond that.
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/step_trace.h"
#include "kv/kv_type.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/serving_model.h"

namespace peregrine::server {

// This machine's roof, measured when the server starts (kernels/machine_probe.h).
struct MachineRoof {
  double bandwidth = 0;  // read bandwidth, bytes/s
  double peak_f32 = 0;   // f32 multiply-add rate, flop/s
  double peak_int8 = 0;  // 8-bit multiply-add rate, op/s (0: none)
};

// What a step of this model costs in arithmetic and in bytes read, from its rows and attention
// (the roofline's coordinates). Approximate: matmul flops 2·params per row, every active weight
// read once per step (a mixture of experts counts the experts one token uses), K/V read once per
// sequence and step.
struct StepCostShape {
  double flops_per_row = 0;          // 2 × active parameters
  double weight_bytes = 0;           // active weight bytes
  double kv_bytes_per_position = 0;  // K and V of one position, every layer
  double flops_per_pair = 0;         // attention: 4 × layers × heads × head_dim per (query, key) pair

  static StepCostShape of(const Model& model, KvType kv_type);
  double flops(const StepSummary& s) const;
  double bytes(const StepSummary& s) const;
};

class EngineViewer {
 public:
  // Everything passed must outlive the viewer.
  EngineViewer(ServingModel& model, const Metrics& metrics, const std::optional<MachineRoof>& roof);

  // The next frame: the state now and the steps this viewer has not seen (at most the last
  // StepTrace::kSteps).
  nlohmann::json frame();

 private:
  ServingModel& model_;
  const Metrics& metrics_;
  std::optional<MachineRoof> roof_;
  StepCostShape cost_;
  int64_t last_step_ = 0;
  std::vector<StepSummary> steps_;  // scratch, at most kSteps
  std::vector<SlotCell> cells_;     // scratch, at most kSteps × kSlots
  // (seconds, generated tokens, computed tokens) of the last frames, for rates over ~2 s.
  struct Sample {
    double t;
    int64_t generated, computed;
  };
  std::array<Sample, 8> samples_{};
  size_t n_samples_ = 0;
};

}  // namespace peregrine::server
