#include "engine/engine.h"

namespace peregrine {

Engine::Engine(Model& model, const Tokenizer* tokenizer, EngineConfig config)
    : core_(model, tokenizer, config), stats_(core_.stats()), thread_([this] { loop(); }) {}

Engine::Engine(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config)
    : core_(runner, tokenizer, config), stats_(core_.stats()), thread_([this] { loop(); }) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

RequestId Engine::submit(Request request, RequestEventCallback on_event) {
  RequestId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    ++outstanding_;
    submissions_.push_back({id, std::move(request), std::move(on_event)});
  }
  wake_.notify_all();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_all();
}

bool Engine::interleave(std::function<bool()> slice) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slice_held_ || stopping_) return false;
    slice_ = std::move(slice);
    slice_held_ = true;
  }
  wake_.notify_all();
  return true;
}

void Engine::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return outstanding_ == 0; });
}

EngineStats Engine::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::loop() {
  while (true) {
    std::vector<Submission> subs;
    std::vector<RequestId> cancels;
    std::function<bool()> slice;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stopping_ || !submissions_.empty() || !cancels_.empty() || core_.has_work() || slice_;
      };
      const std::chrono::milliseconds interval = core_.idle_interval();
      if (interval.count() <= 0) {
        wake_.wait(lock, ready);
      } else {
        while (!wake_.wait_for(lock, interval, ready)) {
          lock.unlock();
          core_.idle();  // a distributed runner's heartbeat; only this thread touches the core
          lock.lock();
        }
      }
      if (stopping_) return;
      subs.swap(submissions_);
      cancels.swap(cancels_);
      slice.swap(slice_);
    }
    // The core is touched only by this thread; the lock guards the queues and the counters.
    for (auto& s : subs) {
      auto callback = std::move(s.on_event);
      core_.add_request(s.id, std::move(s.request), std::move(callback));
    }
    for (RequestId id : cancels) core_.cancel(id);
    // Woken for a slice alone: no serving step to run.
    const bool serve = !slice || !subs.empty() || !cancels.empty() || core_.has_work();
    const std::vector<RequestEvent> events = serve ? core_.step() : std::vector<RequestEvent>{};
    int64_t ended = 0;
    for (const RequestEvent& ev : events) ended += ev.finish != RequestFinish::None ? 1 : 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      outstanding_ -= ended;
      stats_ = core_.stats();
    }
    if (ended > 0) idle_.notify_all();
    // Outside the lock: a slice may take a step's time. It goes back unless it is done.
    if (slice) {
      const bool more = slice();
      std::lock_guard<std::mutex> lock(mu_);
      if (more) slice_ = std::move(slice);
      slice_held_ = more;
    }
  }
}

}  // namespace peregrine
