#pragma once
// A response prepared on the WorkPool: the connection holds this while a worker turns the request
// into its Reply (a whole response, or a PendingResponse such as a generation), then it is that
// reply. The worker hands its result over through shared state, so a client that leaves while its
// request is being prepared costs nothing more: the result is dropped (a generation it had
// started is cancelled) the moment it is ready.
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "server/access_log.h"
#include "server/http_handler.h"
#include "server/work_pool.h"

namespace peregrine::server {

class OffloadedResponse final : public PendingResponse {
 public:
  // What a worker runs; fills `log` (model, prompt) as a route would. Must not throw.
  using Work = std::function<Reply(RequestLog& log)>;

  // Queues `work` on `pool`, in the heavy lane or not (wakeup() is called once its reply is
  // ready); null when the pool's queue is full.
  static std::unique_ptr<OffloadedResponse> start(WorkPool& pool, Work work, Wakeup wakeup, bool heavy);
  ~OffloadedResponse() override;

  // Unknown until the reply is ready: a streamed reply's head comes in Step::head.
  std::optional<HttpResponse> stream_head() override { return std::nullopt; }
  Step poll() override;
  void abandon() override;
  void note(RequestLog& log) const override;

 private:
  struct Shared {
    std::mutex mu;
    std::optional<Reply> reply;  // set by the worker
    RequestLog log;              // what the worker's route noted
    bool abandoned = false;
  };
  explicit OffloadedResponse(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  std::shared_ptr<Shared> shared_;
  std::unique_ptr<PendingResponse> inner_;  // the reply, once it is a pending one
};

}  // namespace peregrine::server
