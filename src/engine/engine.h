#pragma once
// The serving engine as callers see it: thread-safe submit / cancel / stats, with the engine
// loop (EngineCore::step over and over) on its own thread. Event callbacks run on the engine
// thread, so they should be quick (hand the event to a queue).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine_core.h"

namespace peregrine {

class Engine {
 public:
  // Starts the loop thread. `model` and `tokenizer` (may be null) must outlive the Engine.
  Engine(Model& model, const Tokenizer* tokenizer, EngineConfig config);
  // On any runner (which must outlive the Engine).
  Engine(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config);
  ~Engine();  // cancels nothing: finishes the step in progress, then stops (pending requests get no more events)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Returns the request's id at once; its events arrive on `on_event` from the engine thread.
  RequestId submit(Request request, RequestEventCallback on_event);
  // Asks the engine to end the request with RequestFinish::Cancelled (no-op if already ended).
  void cancel(RequestId id);
  // Blocks until every submitted request has ended.
  void wait_idle();
  EngineStats stats();
  // The last steps run (thread-safe; recording never waits on more than one reader's copy).
  const StepTrace& trace() const { return core_.trace(); }
  const EngineConfig& config() const { return core_.config(); }  // fixed at construction

  // Work that must run on the engine thread because it uses the model (the web page's lab runs a
  // small EngineCore of its own on the same Model, whose forward is not thread-safe): the loop
  // calls `slice` once after each step (and while idle, at once), until it returns false. A slice
  // should be one bounded piece (one lab step), so serving waits at most that long per step.
  // One at a time: false (nothing queued) while another is pending. A slice still pending when
  // the engine stops is dropped uncalled.
  bool interleave(std::function<bool()> slice);

 private:
  void loop();

  EngineCore core_;
  std::mutex mu_;
  std::condition_variable wake_;   // the loop waits here for work
  std::condition_variable idle_;   // wait_idle waits here
  struct Submission {
    RequestId id;
    Request request;
    RequestEventCallback on_event;
  };
  std::vector<Submission> submissions_;
  std::vector<RequestId> cancels_;
  std::function<bool()> slice_;    // interleave()'s work, null when none or while it runs
  bool slice_held_ = false;        // a slice is pending (queued or running)
  RequestId next_id_ = 1;
  int64_t outstanding_ = 0;        // submitted and not yet ended
  bool stopping_ = false;
  bool busy_ = false;
  EngineStats stats_;
  std::thread thread_;             // last: starts after everything above exists
};

}  // namespace peregrine
