#pragma once
// What EngineCore runs each step's batch on. The engine decides everything (which sequences, which
// KV blocks, what to sample); a runner only computes the logits of one batch against the engine's
// KV cache. LocalRunner is a Model in this process; dist/ has runners that spread the model over
// several processes (tensor and pipeline parallelism) behind the same interface, so EngineCore
// has one code path whatever the layout.
#include <chrono>
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

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  // The shape of the KV cache the engine keeps in this process (a partial model's share).
  virtual KvShape kv_shape() const = 0;
  // The engine built `kv` (and will pass it to every forward); a distributed runner makes the
  // other processes build their shard of it. unbind_cache: the engine is going away.
  virtual void bind_cache(KvCache& kv) {}
  virtual void unbind_cache(KvCache& kv) {}
  // logits: [rows with want_logits][n_vocab] in batch order (Model::forward's contract).
  virtual void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) = 0;
  // Pipelining: how many steps may be in flight at once (a pipeline of P stages takes P, so each
  // stage works on another micro-batch). submit starts a step; collect returns the logits of the
  // oldest step submitted and not yet collected. The engine never puts a sequence in two steps
  // in flight. By default a step runs whole in submit.
  virtual int max_in_flight() const { return 1; }
  virtual void submit(const Batch& batch, KvCache& kv) { forward(batch, kv, submitted_); }
  virtual void collect(std::vector<float>& logits) { logits.swap(submitted_); }
  // A second lane for prompt steps (disaggregated prefill/decode): the prompts run in a pool of
  // their own, in the background, one step at a time, while the engine keeps submitting decode
  // steps (submit/collect) to the decode pool. A sequence goes to the prefill lane until its
  // prompt's logits came back and to the decode lane from then on (Sequence::decoding()).
  virtual bool has_prefill_lane() const { return false; }
  // Starts a step of prompt rows only (none of its sequences decoding); one at a time.
  virtual void submit_prefill(const Batch& batch, KvCache& kv) {
    throw std::logic_error("this runner has no prefill lane");
  }
  // Whether the prompt step in flight has finished; never waits.
  virtual bool prefill_done() { return true; }
  // Its logits ([rows with want_logits][n_vocab] in batch order), waiting for it if it must; the
  // K/V of every prompt it completed is in the decode pool when it returns.
  virtual void collect_prefill(std::vector<float>& logits) {
    throw std::logic_error("this runner has no prefill lane");
  }
  // The final hidden states ([rows][dim]) of the last forward's logits rows, or empty when this
  // process does not have them (a pipeline's last stage is elsewhere).
  virtual std::span<const float> logits_hidden() const = 0;
  // How often an idle engine should call idle() (0: never): distributed runners tell the other
  // processes that this one is alive.
  virtual std::chrono::milliseconds idle_interval() const { return std::chrono::milliseconds(0); }
  virtual void idle() {}
  // Disaggregated prefill/decode: positions [0, result) of `seq` hold K/V in this process's cache
  // (its prompt, prefilled here); the decode steps' K/V lives in the decode pool's cache, so the
  // engine offers only the blocks below this to later prompts (prefix caching).
  virtual int64_t local_kv_length(SeqId seq, int64_t n_computed) const { return n_computed; }
  // Whether the engine may give back the blocks a sliding window has passed (every layer
  // windowed): not where a prompt's blocks are later shipped whole to another process.
  virtual bool releases_windowed_blocks() const { return true; }
  // Sequences the last collected step could not run (their K/V did not reach the decode pool),
  // with the reason: the engine ends those requests with an error and keeps serving the others.
  virtual std::vector<std::pair<SeqId, std::string>> take_failed_sequences() { return {}; }

 private:
  std::vector<float> submitted_;  // the default submit's logits, until collected
};

// The whole model in this process.
class LocalRunner final : public ModelRunner {
 public:
  explicit LocalRunner(Model& model) : model_(model) {}
  const ModelConfig& config() const override { return model_.config(); }
  KvShape kv_shape() const override { return model_.kv_shape(); }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override {
    model_.forward(batch, kv, logits);
  }
  std::span<const float> logits_hidden() const override { return model_.logits_hidden(); }

 private:
  Model& model_;
};

}  // namespace peregrine
