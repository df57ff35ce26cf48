#pragma once
// The serving engine's synchronous core: owns the KV cache, the block manager, the scheduler and
// every live request; step() runs one iteration: settle (errors, cancellations, a finished prompt
// step) → schedule (drafts, then the chunks, under the scheduler's budget) → launch (one forward
// pass over the mixed batch) → land (sample or verify, stop checks, events). Single-threaded;
// engine.h runs it on its own thread. engine_core.cpp runs the step; engine_commit.cpp turns a
// landed step's logits into tokens.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/model_runner.h"
#include "engine/output.h"
#include "engine/proposer.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_trace.h"
#include "engine/verifier.h"
#include "kv/block_manager.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

inline constexpr int64_t kMaxSpecTokens = 32;

struct EngineConfig {
  SchedulerConfig scheduler;
  KvType kv_type = KvType::F16;
  int64_t kv_blocks = 1024;       // size it from a memory budget with size_kv_cache (kv/kv_sizing.h)
  int32_t block_size = 16;
  bool prefix_caching = true;
  // Speculative decoding: proposes up to spec_tokens drafts per decoding sequence and step
  // (none: plain decoding). Shared so the caller can keep its own handle for statistics.
  std::shared_ptr<Proposer> proposer;
  int64_t spec_tokens = 4;         // drafts per sequence and step, in [1, kMaxSpecTokens]
  // Speculation pays while decode is memory-bound: with more sequences decoding than this, a
  // step runs without drafts (docs/performance.md measures where verification stops paying).
  int64_t spec_max_batch = 8;
  // Choose each step's number of drafts (0..spec_tokens) from measured acceptance and step costs
  // (DraftPolicy), so speculation is used only where it is expected to pay; false: always
  // spec_tokens. Either way the text is the same (every proposal is verified in the coupled
  // form, verifier.h, so the text is plain decoding's).
  bool spec_adaptive = true;
  // Drop every sequence's K/V after each generated token, so each step recomputes the whole
  // prefix (`run --no-kv-cache`: what the cache saves, made visible). Same tokens, much slower.
  bool recompute_kv = false;
  // Latency-aware chunked prefill ("decode priority"): size each step's prefill tokens so the
  // step's predicted time (StepCostModel, learned while serving) stays within max_step_ms, at
  // least min_prefill_chunk of them so prompts still progress; kAutoStepBudget = a budget derived
  // from the measured step costs (engine/step_budget.h; the CLI's default); 0 = fixed chunks of up
  // to max_batched_tokens ("prefill priority": shortest time to first token, longest stalls).
  double max_step_ms = 0;
  int64_t min_prefill_chunk = 16;
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;      // held by sequences (not free, not merely cached)
  int64_t kv_blocks_free = 0;      // on the free list (the rest are cached prefixes no sequence holds)
  double kv_usage = 0;             // kv_blocks_used / kv_blocks_total
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  double prefix_hit_rate = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;               // forward passes
  int64_t computed_tokens = 0;     // tokens run through the model (prompt, recompute, decode)
  int64_t generated_tokens = 0;
  int64_t finished = 0;
  int64_t slot_steps_used = 0;     // sum over steps of the sequences that ran
  int64_t draft_tokens = 0;        // speculation: tokens proposed and verified
  int64_t accepted_tokens = 0;     // of those, accepted
  int64_t verifications = 0;       // decode chunks that carried drafts
  int64_t decode_rows = 0;         // sequences' decode chunks run (target passes per sequence)
  int64_t draft_passes = 0;        // the proposer's model passes
  int64_t prefill_steps = 0;       // steps that carried prompt tokens
  int64_t costed_steps = 0;        // steps run once the step-time model was fitted
  int64_t compute_bound_steps = 0;  // of those, steps past the ridge (StepCostModel::compute_bound)
  int64_t max_steps_in_flight = 0;  // the most steps a pipelined runner held at once (1 otherwise)
  int64_t steps_beside_prefill = 0;           // decode steps run while a prompt step ran in the prefill lane
  double step_cost_ms_per_prefill_token = 0;  // the step-time model's current fit (0 until fitted)
  double step_cost_ms_per_decode_row = 0;
  std::vector<int64_t> accepted_length;  // [kMaxSpecTokens + 1]: verifications by drafts accepted
  int64_t grammar_rows = 0;              // constrained decoding: logits rows masked
  double grammar_ms = 0;                 // time spent masking them and advancing grammar states
  double slot_utilization() const;  // slot_steps_used / (steps * max_seqs)
  int64_t max_seqs = 0;
};

class EngineCore {
 public:
  // `tokenizer` may be null: then no text is produced, stop strings and EOS do not apply (stop
  // token ids still do). Throws UsageError for an invalid configuration.
  EngineCore(Model& model, const Tokenizer* tokenizer, EngineConfig config);
  // The same on any runner (a model spread over several processes, dist/); `runner` must
  // outlive the core.
  EngineCore(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Queues a request; `on_event` receives its events during step(). An invalid request (empty
  // prompt, bad token id, too long for the context or the whole KV cache, bad sampling params)
  // is accepted and ends with RequestFinish::Error at the next step.
  RequestId add_request(Request request, RequestEventCallback on_event = {});
  // Same with a caller-chosen id (unique, 0 <= id < 2^31).
  void add_request(RequestId id, Request request, RequestEventCallback on_event);
  // Ends the request with RequestFinish::Cancelled at the next step; false if it is unknown or
  // already finished.
  bool cancel(RequestId id);

  // One iteration. Returns the events of this step (also given to the callbacks).
  std::vector<RequestEvent> step();
  bool has_work() const { return !live_.empty() || !pending_errors_.empty(); }
  // For an engine with nothing to do: how often to call idle(), which lets a distributed runner
  // tell its other processes that this one is alive (0: never).
  std::chrono::milliseconds idle_interval() const { return runner_.idle_interval(); }
  void idle() { runner_.idle(); }

  EngineStats stats() const;
  // The last steps run, per batch slot; safe to read from any thread.
  const StepTrace& trace() const { return trace_; }
  const EngineConfig& config() const { return config_; }
  BlockManager& block_manager() { return blocks_; }
  const KvCache& kv() const { return kv_; }

 private:
  // Both public constructors: `local` owns the runner when built on a whole Model.
  EngineCore(std::unique_ptr<LocalRunner> local, ModelRunner* runner, const Tokenizer* tokenizer, EngineConfig config);

  struct Live {
    std::unique_ptr<Sequence> seq;
    RequestEventCallback on_event;
    bool cancel_requested = false;
  };

  enum class Lane { Main, Prefill };
  // A step started on the runner (or its prefill lane) and not yet collected.
  struct Flight {
    Lane lane = Lane::Main;
    SchedulerOutput work;
    Batch batch;
    int64_t prefill_tokens = 0;
    std::chrono::steady_clock::time_point start;
  };

  void check_config() const;
  std::optional<std::string> validate(const Request& r) const;
  void start_grammar(Sequence& s) const;
  void emit(Live& live, RequestEvent&& ev, std::vector<RequestEvent>& out);
  void finish(RequestId id);

  // The four phases of step().
  void settle(std::vector<RequestEvent>& out);
  SchedulerOutput schedule();
  void launch(SchedulerOutput& work, std::vector<RequestEvent>& out);
  void land_due(bool nothing_launched, std::vector<RequestEvent>& out);

  void propose();
  void start(const SchedulerOutput& work, Lane lane, std::vector<RequestEvent>& out);
  void land(Lane lane, std::vector<RequestEvent>& out);
  void fail_chunks(const SchedulerOutput& work, const std::string& what, std::vector<RequestEvent>& out);
  void fail_everything(const std::string& reason, std::vector<RequestEvent>& out);

  // engine_commit.cpp: a collected step's results, sequence by sequence.
  void commit(const Flight& f, const StepResult& r, std::vector<RequestEvent>& out);
  // Verifies and commits one decoding (or prompt-completing) chunk's tokens. logits:
  // [rows][n_vocab], one row per token from the last committed one on; hidden: [rows][dim] the
  // final hidden states of those rows (or empty).
  // offers_prefix: its newly full blocks enter the prefix cache.
  RequestEvent advance(Sequence& s, std::span<const float> logits, std::span<const float> hidden, bool offers_prefix);
  // advance() behind the request's boundary: whatever it throws (a grammar grown too ambiguous,
  // sampling, detokenizing, the proposer's bookkeeping) ends this request with an error event,
  // never the engine or the other requests of the step.
  RequestEvent advance_or_fail(Sequence& s, std::span<const float> logits, std::span<const float> hidden,
                               bool offers_prefix);
  // Samples (no drafts) or verifies (drafts) one chunk's tokens; a constrained request's rows are
  // masked first. Returns false (ev finished) when the grammar allows nothing.
  bool choose_tokens(Sequence& s, std::span<const float> logits, int64_t n_drafts, Verdict& v, RequestEvent& ev);
  void trace_step(const SchedulerOutput& work, double ms, double predicted_ms, double budget_ms);

  std::unique_ptr<LocalRunner> local_;  // when built on a Model
  ModelRunner& runner_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  KvCache kv_;
  BlockManager blocks_;
  Scheduler scheduler_;  // with the step's budget and the draft policy
  std::map<RequestId, Live> live_;
  std::vector<std::pair<RequestEvent, RequestEventCallback>> pending_errors_;
  std::optional<std::string> failure_;  // set once the runner failed for good
  RequestId next_id_ = 1;
  uint64_t arrivals_ = 0;
  EngineStats counters_;
  std::deque<Flight> flights_;     // oldest first; at most runner_.max_in_flight()
  std::optional<Flight> prefill_;  // the prompt step in the runner's prefill lane
  std::vector<TokenId> end_of_generation_;  // the tokenizer's end-of-generation ids
  std::vector<float> masked_;               // scratch: a constrained chunk's masked logits rows
  StepTrace trace_;
};

}  // namespace peregrine
