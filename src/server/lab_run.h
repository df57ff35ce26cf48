#pragma once
// What the lab's experiments share (lab.h): their context, input checks, and running a small
// EngineCore of the lab's own on the serving engine's thread, one step between two serving steps.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_core.h"
#include "server/lab.h"

namespace peregrine::server::lab {

struct Context {
  ServingModel& model;
  const LabOptions& options;
  const std::atomic<bool>& stopping;
};

// The field as an integer in [lo, hi], `fallback` when absent (ApiError 400 otherwise).
int64_t int_field(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback);
// The prompt a run starts from: "prompt" (text, tokenized with BOS as generation does) or the
// default text; at most max_tokens tokens (400 beyond).
std::vector<TokenId> prompt_field(ServingModel& model, const nlohmann::json& body, int64_t max_tokens);
// `ids` cut or padded to n tokens (its text repeated after the BOS).
std::vector<TokenId> prompt_of_length(std::vector<TokenId> ids, int64_t n);
// The model, when it runs in this process (409 otherwise: a layout of processes has no lab).
Model& local_model(ServingModel& model);

// One step the lab's core ran.
struct LabStep {
  double ms = 0;  // the step alone (not the serving steps around it), wall time
  // The engine thread's CPU time in the step: unlike wall time not inflated when other processes
  // take the CPU (on a loaded machine); with several compute threads it counts the engine
  // thread's share of the work only.
  double cpu_ms = 0;
  std::vector<RequestEvent> events;  // what it produced
  std::vector<TokenId> drafts;       // what a proposer drafted for this step (the speculative run)
};

struct LabRun {
  std::vector<LabStep> steps;
  bool under_load = false;  // the serving engine had requests while this ran
  bool truncated = false;   // stopped at the deadline (or the server stopping) with work left
  double wall_ms = 0;       // first step to last, serving steps between included
};

// A config for the lab's core: the serving engine's KV type and block size, room for `tokens`
// positions (at most Lab::kMaxLabKvTokens), steps of at most Lab::kLabStepTokens tokens, `seqs`
// sequences at once, no prefix caching (every run computes what it shows).
EngineConfig lab_config(const Engine& serving, int64_t tokens, int64_t seqs);

// Steps `core` until it has no work left, each step on `serving`'s thread after one of its own
// steps (Engine::interleave), stopping early after `seconds` or when `stopping` is set.
// `after_step` (on the engine thread, right after each step) may add to the step's record.
LabRun run_interleaved(Engine& serving, EngineCore& core, const std::atomic<bool>& stopping, double seconds,
                       std::function<void(LabStep&)> after_step = {});

// Greedy sampling that never stops early: a lab request generates exactly max_tokens tokens.
Request lab_request(std::vector<TokenId> prompt, int64_t max_tokens);

// The experiments (one file each beside lab.cpp); each checks its body and returns the work.
LabJob matmul(const Context& c, const nlohmann::json& body);
LabJob steps(const Context& c, const nlohmann::json& body);
LabJob kv_cache(const Context& c, const nlohmann::json& body);
LabJob batching(const Context& c, const nlohmann::json& body);
LabJob speculative(const Context& c, const nlohmann::json& body);
LabJob attention(const Context& c, const nlohmann::json& body);

}  // namespace peregrine::server::lab
