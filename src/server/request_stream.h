#pragma once
// The bridge between the engine thread and the HTTP side for one API request: every choice
// (prompt x n) is one engine request whose events the engine's callback pushes into a shared
// queue. When the queue turns non-empty the job calls its wakeup (the connection then takes the
// events on its own thread), so nothing blocks waiting for tokens. The queue is shared-owned by
// the callbacks, so events arriving after the HTTP side is gone are harmless. Also feeds the
// metrics (TTFT, inter-token and end-to-end latency).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/serving_model.h"

namespace peregrine::server {

struct ChoiceEvent {
  size_t choice = 0;  // index in the response's choices
  RequestEvent event;
};

// Sequences submitted and waiting for their first event, across the server; --max-queue bounds
// it (429 beyond).
class AdmissionCounter {
 public:
  explicit AdmissionCounter(int64_t limit) : limit_(limit) {}
  // Reserves `n` places; false (nothing reserved) if the limit would be passed.
  bool try_reserve(int64_t n);
  void release(int64_t n) { waiting_.fetch_sub(n); }
  int64_t waiting() const { return waiting_.load(); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> waiting_{0};
};

class GenerationJob;

// The jobs in flight across the server: shutdown waits for them, then cancels the rest.
class JobSet {
 public:
  // Keeps a job in the set for exactly as long as the membership exists.
  class Membership {
   public:
    Membership(JobSet& set, GenerationJob* job);
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;

   private:
    JobSet& set_;
    GenerationJob* job_;
  };
  size_t size() const;
  void cancel_all();

 private:
  mutable std::mutex mu_;
  std::set<GenerationJob*> jobs_;
};

class GenerationJob {
 public:
  using Clock = std::chrono::steady_clock;

  // Builds one engine Request per choice: choice index = prompt * n + i, seeded seed + i (or a
  // random seed when the request has none), each under `constraint` (null: free text).
  GenerationJob(Engine& engine, std::shared_ptr<Metrics> metrics, AdmissionCounter& admission,
                const GenerationRequest& request, const std::vector<PreparedPrompt>& prompts,
                std::shared_ptr<TokenConstraint> constraint = nullptr);
  ~GenerationJob();  // cancels whatever is still running
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // Reserves admission and submits every choice; false (nothing submitted) when the queue is full.
  bool submit();
  // Ends every unfinished choice (finish "abort"); safe from any thread, more than once.
  void cancel();
  // Called (from the engine thread) whenever events arrive on an empty queue. Set it before
  // submit().
  void set_wakeup(std::function<void()> wakeup);
  // The events queued so far (maybe none); never blocks.
  std::vector<ChoiceEvent> take();
  bool finished() const;  // every choice has its final event (and it was returned by take)
  size_t n_choices() const { return requests_.size(); }
  int64_t prompt_tokens(size_t choice) const { return static_cast<int64_t>(requests_[choice].prompt.size()); }
  Clock::time_point arrival() const { return arrival_; }

 private:
  struct Shared;
  Engine& engine_;
  AdmissionCounter& admission_;
  std::vector<Request> requests_;
  std::vector<RequestId> ids_;
  std::shared_ptr<Shared> shared_;
  size_t delivered_finishes_ = 0;
  Clock::time_point arrival_;
};

}  // namespace peregrine::server
