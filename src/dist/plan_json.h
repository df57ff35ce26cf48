#pragma once
// `peregrine plan`'s figures as JSON and a plan's model read from a model file: shared by the
// command (cli/tools/cmd_plan.cpp) and the web page's plan form (server/lab.cpp).
#include <nlohmann/json.hpp>
#include <string>

#include "dist/plan.h"
#include "format/model_file.h"

namespace peregrine::dist {

// The model's shape and parameter count from its file (every tensor counts; bytes per parameter
// from the bytes they take). `name` is what the plan calls it.
PlanModel plan_model_of(const ModelFile& file, const std::string& name);

// One layout's figures: tp, pp, ep, devices, memory per device, largest batch, decode and prefill
// bounds (and "refusal" when the model cannot be cut that way).
nlohmann::json plan_figures_json(const PlanFigures& f);

}  // namespace peregrine::dist
