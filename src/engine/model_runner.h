#pragma once
// What EngineCore runs each step's batch on. The engine decides everything (which sequences, which
// KV blocks, what to sample); a runner only computes the logits of one batch against the engine's
// KV cache. LocalRunner is a Model in this process; dist/ has runners that spread the model over
// several processes (tensor and pipeline parallelism) behind the same interface, so EngineCore
// has one code path whatever the layout.
#include <chrono>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/batch.h"

namespace peregrine {

// Thrown by a runner that can never run another step (a process of a distributed model died or
// hangs): the engine ends every request with its message and refuses new ones.
class RunnerFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One collected step: views into the runner's memory, valid until its next submit, collect or
// forward (the engine commits a step before it collects the next).
struct StepResult {
  std::span<const float> logits;  // [rows with want_logits][n_vocab] in batch order
  // The final hidden states ([rows][dim]) of those rows, or empty when this process does not have
  // them (a pipeline's last stage is elsewhere).
  std::span<const float> hidden;
  // Sequences the step could not run (their K/V did not reach the decode pool), with the reason:
  // the engine ends those requests with an error and keeps serving the others.
  std::span<const std::pair<SeqId, std::string>> failed;
};

// A second lane for prompt steps (disaggregated prefill/decode, dist/disagg_runner.h): the prompts
// run in a pool of their own, in the background, one step at a time, while the engine keeps
// submitting decode steps to the runner. A sequence goes to the prefill lane until its prompt's
// logits came back and to the decode lane from then on (SeqPhase::Decode). The lane ships each
// finished prompt's blocks whole to the decode pool, so the engine gives back no block a sliding
// window has passed while a runner has one; and the K/V of decode steps lives only in the decode
// pool, so the engine offers to later prompts (prefix caching) only the blocks of prompt steps.
class PrefillLane {
 public:
  virtual ~PrefillLane() = default;
  // Starts a step of prompt rows only (none of its sequences decoding); one at a time.
  virtual void submit(const Batch& batch, KvCache& kv) = 0;
  // Whether the prompt step in flight has finished; never waits.
  virtual bool done() = 0;
  // Its logits (and nothing else), waiting for it if it must; the K/V of every prompt it
  // completed is in the decode pool when it returns.
  virtual StepResult collect() = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  // The shape of the KV cache the engine keeps in this process (a partial model's share).
  virtual KvShape kv_shape() const = 0;
  // Storage for the engine's KV cache (spec.shape: kv_shape()), in the execution context of the
  // model in this process.
  virtual std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) = 0;
  // The engine built `kv` (and will pass it to every forward); a distributed runner makes the
  // other processes build their shard of it. unbind_cache: the engine is going away.
  virtual void bind_cache(KvCache& kv) {}
  virtual void unbind_cache(KvCache& kv) {}
  // logits: [rows with want_logits][n_vocab] in batch order (Model::forward's contract).
  virtual void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) = 0;
  // Pipelining: how many steps may be in flight at once (a pipeline of P stages takes P, so each
  // stage works on another micro-batch). submit starts a step; collect returns the result of the
  // oldest step submitted and not yet collected. The engine never puts a sequence in two steps
  // in flight. By default a step runs whole in submit.
  virtual int max_in_flight() const { return 1; }
  virtual void submit(const Batch& batch, KvCache& kv) { forward(batch, kv, submitted_); }
  virtual StepResult collect() { return {submitted_, {}, {}}; }
  // The runner's prefill lane, or null when prompts and decodes share one lane (every runner but
  // disaggregated prefill/decode).
  virtual PrefillLane* prefill_lane() { return nullptr; }
  // How often an idle engine should call idle() (0: never): distributed runners tell the other
  // processes that this one is alive.
  virtual std::chrono::milliseconds idle_interval() const { return std::chrono::milliseconds(0); }
  virtual void idle() {}

 protected:
  std::vector<float> submitted_;  // the default submit's logits, until the next submit
};

// The whole model in this process.
class LocalRunner final : public ModelRunner {
 public:
  explicit LocalRunner(Model& model) : model_(model) {}
  const ModelConfig& config() const override { return model_.config(); }
  KvShape kv_shape() const override { return model_.kv_shape(); }
  std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) override {
    return model_.context().allocate_kv(spec);
  }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override {
    model_.forward(batch, kv, logits);
  }
  StepResult collect() override {
    model_.copy_logits_hidden(hidden_);
    return {submitted_, hidden_, {}};
  }

 private:
  Model& model_;
  std::vector<float> hidden_;  // the collected step's final hidden states, copied to the host
};

}  // namespace peregrine
