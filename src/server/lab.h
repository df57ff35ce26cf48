#pragma once
// The web page's lab (docs/api.md, "The lab"): each figure of the fast-inference chapter as an
// experiment on this server's model and machine. POST /v1/lab/<experiment> with a JSON body:
//   kv-sizes, plan              arithmetic only (KV bytes per head layout, `peregrine plan`): answered
//                               at once, no lab run
//   matmul                      naive triple loop against the tuned kernel on the page's matrices
//   steps                       one prefill chunk and one decode step, placed on the roofline
//   kv-cache                    N tokens with and without the KV cache, time per token by position
//   batching                    the same requests under static and continuous batching
//   speculative                 a proposer's passes, accepted / rejected / bonus tokens, against plain
//   attention                   one real attention row, tiled with an online softmax
// Bounds: one run at a time (a second gets 429, checked after its body is), every size capped
// (400 before any work), a run ends after kRunSeconds whatever it has done (marked truncated).
// Runs that use the model go through the serving engine's thread (Engine::interleave): a small
// EngineCore of the lab's own (its own KV cache of at most kMaxLabKvTokens positions) runs one
// step of at most kLabStepTokens tokens between two serving steps, so serving waits at most one
// such step per step of its own; a result measured while requests were being served says so
// (under_load). Runs that do not use the engine (matmul, the attention row's reference) run on
// the lab's one thread, below the engine's priority.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/proposer.h"
#include "model/model.h"
#include "server/engine_view.h"
#include "server/serving_model.h"

namespace peregrine::server {

// Builds a fresh proposer of a registered name (engine/proposer_registry.h) for the lab's engine,
// with its file found as `serve` finds it (cli/spec_flags.h); throws UsageError when it has none.
using LabProposerFactory =
    std::function<std::shared_ptr<Proposer>(const std::string& name, const Model& target, int64_t kv_tokens)>;

struct LabOptions {
  std::optional<MachineRoof> roof;     // this machine's roof (measured at start-up)
  std::vector<std::string> proposers;  // names the speculative panel offers
  LabProposerFactory make_proposer;    // null: ngram only (it needs no file)
};

// A run whose input was checked: the work, to run on the lab's thread.
using LabJob = std::function<nlohmann::json()>;

class Lab {
 public:
  static constexpr int64_t kLabStepTokens = 64;     // tokens one lab step runs at most
  static constexpr int64_t kMaxLabKvTokens = 4096;  // positions the lab's own KV cache holds at most
  static constexpr double kRunSeconds = 20;         // a run stops here (truncated)

  explicit Lab(LabOptions options) : options_(std::move(options)) {}

  // GET /v1/lab: the model's shape, the limits of every experiment, the proposers.
  nlohmann::json info(ServingModel& model) const;
  // The arithmetic experiments, answered at once.
  nlohmann::json kv_sizes(ServingModel& model, const nlohmann::json& body) const;
  nlohmann::json plan(ServingModel& model, const nlohmann::json& body) const;
  // A run: `body` checked now (ApiError 400; 404 for an unknown experiment), the work returned.
  LabJob prepare(std::string_view experiment, ServingModel& model, const nlohmann::json& body) const;
  static bool is_run(std::string_view experiment);

  // One run at a time: false while one holds the lab.
  bool try_begin() { return !busy_.exchange(true); }
  void end() { busy_.store(false); }
  // The server is stopping: runs end at their next step.
  void stop() { stopping_.store(true); }

 private:
  LabOptions options_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> stopping_{false};
};

}  // namespace peregrine::server
