#include "server/offloaded_response.h"

#include <utility>

namespace peregrine::server {

std::unique_ptr<OffloadedResponse> OffloadedResponse::start(WorkPool& pool, Work work, Wakeup wakeup, bool heavy) {
  auto shared = std::make_shared<Shared>();
  const bool queued = pool.try_submit([shared, work = std::move(work), wakeup = std::move(wakeup)] {
    {
      std::lock_guard lock(shared->mu);
      if (shared->abandoned) return;  // the client left while this waited
    }
    RequestLog log;
    std::optional<Reply> reply = work(log);
    {
      std::lock_guard lock(shared->mu);
      if (!shared->abandoned) {
        shared->reply.swap(reply);
        shared->log = std::move(log);
      }
    }
    // `reply` still holds the result here when the client left meanwhile: dropped now, outside
    // the lock (a generation's destructor cancels it).
    reply.reset();
    wakeup();
  }, heavy);
  if (!queued) return nullptr;
  return std::unique_ptr<OffloadedResponse>(new OffloadedResponse(std::move(shared)));
}

OffloadedResponse::~OffloadedResponse() { abandon(); }

PendingResponse::Step OffloadedResponse::poll() {
  Step step;
  if (!inner_) {
    std::optional<Reply> reply;
    {
      std::lock_guard lock(shared_->mu);
      reply.swap(shared_->reply);
    }
    if (!reply) return step;  // still being prepared
    if (auto* whole = std::get_if<HttpResponse>(&*reply)) {
      step.whole = std::move(*whole);
      step.done = true;
      return step;
    }
    inner_ = std::move(std::get<std::unique_ptr<PendingResponse>>(*reply));
    step.head = inner_->stream_head();
  }
  Step next = inner_->poll();
  step.data = std::move(next.data);
  step.whole = std::move(next.whole);
  step.done = next.done;
  return step;
}

void OffloadedResponse::abandon() {
  std::optional<Reply> reply;
  {
    std::lock_guard lock(shared_->mu);
    shared_->abandoned = true;
    reply.swap(shared_->reply);
  }
  if (inner_) inner_->abandon();
}

void OffloadedResponse::note(RequestLog& log) const {
  {
    std::lock_guard lock(shared_->mu);
    if (!shared_->log.model.empty()) log.model = shared_->log.model;
    if (!shared_->log.prompt.empty()) log.prompt = shared_->log.prompt;
  }
  if (inner_) inner_->note(log);
}

}  // namespace peregrine::server
