#include "server/request_stream.h"

#include <random>

namespace peregrine::server {

bool AdmissionCounter::try_reserve(int64_t n) {
  int64_t current = waiting_.load();
  while (true) {
    if (current + n > limit_) return false;
    if (waiting_.compare_exchange_weak(current, current + n)) return true;
  }
}

JobSet::Membership::Membership(JobSet& set, GenerationJob* job) : set_(set), job_(job) {
  std::lock_guard<std::mutex> lock(set_.mu_);
  set_.jobs_.insert(job_);
}

JobSet::Membership::~Membership() {
  std::lock_guard<std::mutex> lock(set_.mu_);
  set_.jobs_.erase(job_);
}

size_t JobSet::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void JobSet::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (GenerationJob* job : jobs_) job->cancel();
}

// What the engine callbacks touch: outlives the job if events are still in flight.
struct GenerationJob::Shared {
  std::mutex mu;
  std::deque<ChoiceEvent> queue;
  std::function<void()> wakeup;
  std::shared_ptr<Metrics> metrics;
  AdmissionCounter* admission = nullptr;  // the server's; outlives the engine
  Clock::time_point arrival;
  std::vector<Clock::time_point> last_token;  // per choice
  std::vector<bool> started;                  // per choice: first event seen (left the queue)
  std::vector<bool> ended;                    // per choice: final event seen
};

GenerationJob::GenerationJob(Engine& engine, std::shared_ptr<Metrics> metrics, AdmissionCounter& admission,
                             const GenerationRequest& request, const std::vector<PreparedPrompt>& prompts,
                             std::shared_ptr<TokenConstraint> constraint)
    : engine_(engine), admission_(admission), shared_(std::make_shared<Shared>()), arrival_(Clock::now()) {
  std::random_device entropy;
  for (const PreparedPrompt& p : prompts) {
    for (int64_t i = 0; i < request.n; ++i) {
      Request r;
      r.prompt = p.tokens;
      r.sampling = request.sampling;
      r.sampling.seed = request.seed ? *request.seed + static_cast<uint64_t>(i)
                                     : (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
      r.max_tokens = p.max_tokens;
      r.stop = request.stop;
      r.ignore_eos = request.ignore_eos;
      r.speculate = request.speculative;
      r.grammar = constraint;
      requests_.push_back(std::move(r));
    }
  }
  shared_->metrics = std::move(metrics);
  shared_->admission = &admission_;
  shared_->arrival = arrival_;
  shared_->last_token.assign(requests_.size(), arrival_);
  shared_->started.assign(requests_.size(), false);
  shared_->ended.assign(requests_.size(), false);
}

GenerationJob::~GenerationJob() { cancel(); }

bool GenerationJob::submit() {
  if (!admission_.try_reserve(static_cast<int64_t>(requests_.size()))) return false;
  for (size_t c = 0; c < requests_.size(); ++c) {
    shared_->metrics->add_prompt_tokens(static_cast<int64_t>(requests_[c].prompt.size()));
    std::shared_ptr<Shared> shared = shared_;
    ids_.push_back(engine_.submit(requests_[c], [shared, c](const RequestEvent& ev) {
      const Clock::time_point now = Clock::now();
      Shared& s = *shared;
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.started[c]) {
        s.started[c] = true;
        s.admission->release(1);
      }
      for (size_t i = 0; i < ev.tokens.size(); ++i) {  // several at once after accepted speculation
        const bool first = s.last_token[c] == s.arrival;
        s.metrics->observe_token(first, std::chrono::duration<double>(now - s.last_token[c]).count());
        s.last_token[c] = now;
      }
      if (ev.finish != RequestFinish::None) {
        s.ended[c] = true;
        s.metrics->observe_finish(ev.finish, std::chrono::duration<double>(now - s.arrival).count());
      }
      const bool was_empty = s.queue.empty();
      s.queue.push_back({c, ev});
      if (was_empty && s.wakeup) s.wakeup();
    }));
  }
  return true;
}

void GenerationJob::cancel() {
  std::vector<RequestId> live;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (size_t c = 0; c < ids_.size(); ++c) {
      if (!shared_->ended[c]) live.push_back(ids_[c]);
    }
  }
  for (RequestId id : live) engine_.cancel(id);
}

void GenerationJob::set_wakeup(std::function<void()> wakeup) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->wakeup = std::move(wakeup);
}

std::vector<ChoiceEvent> GenerationJob::take() {
  std::vector<ChoiceEvent> out;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    out.assign(std::make_move_iterator(shared_->queue.begin()), std::make_move_iterator(shared_->queue.end()));
    shared_->queue.clear();
  }
  for (const ChoiceEvent& e : out) delivered_finishes_ += e.event.finish != RequestFinish::None ? 1 : 0;
  return out;
}

bool GenerationJob::finished() const { return delivered_finishes_ == requests_.size(); }

}  // namespace peregrine::server
