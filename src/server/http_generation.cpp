// POST /v1/completions and /v1/chat/completions: parse, prepare, submit every choice to the
// engine, then answer once the whole response is ready or stream it as Server-Sent Events. The
// connection polls the response when the engine has news; a client that goes away (seen by the
// connection's read or a failed write) abandons it, which cancels its engine requests at once
// and frees their KV blocks, streamed or not.
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/response_builder.h"

namespace peregrine::server {

class HttpServer::GenerationResponse final : public PendingResponse {
 public:
  GenerationResponse(HttpServer& server, ServingModel& model, const GenerationRequest& request,
                     const std::vector<PreparedPrompt>& prompts, std::shared_ptr<TokenConstraint> constraint,
                     const Wakeup& wakeup)
      : job_(model.engine(), server.metrics_, server.admission_, request, prompts, std::move(constraint)),
        membership_(server.jobs_, &job_),
        builder_(request, prompts, model.tokenizer(), model.name(), model.tool_format()),
        stream_(request.stream) {
    job_.set_wakeup(wakeup);
  }

  bool submit() { return job_.submit(); }

  std::optional<HttpResponse> stream_head() override {
    if (!stream_) return std::nullopt;
    return event_stream_head();
  }

  Step poll() override {
    Step step;
    const std::vector<ChoiceEvent> events = job_.take();
    if (stream_) {
      if (!started_) {
        started_ = true;
        step.data = builder_.stream_start();
      }
      step.data += builder_.stream_events(events);
      if (job_.finished()) {
        step.data += builder_.stream_end();
        step.done = true;
      }
      return step;
    }
    builder_.accumulate(events);
    if (job_.finished()) {
      step.done = true;
      try {
        step.whole = json_response(200, builder_.response());
      } catch (const ApiError& e) {
        step.whole = error_response(e);
      }
    }
    return step;
  }

  void abandon() override { job_.cancel(); }

  void note(RequestLog& log) const override {
    log.prompt_tokens = builder_.prompt_tokens();
    log.completion_tokens = builder_.completion_tokens();
  }

 private:
  GenerationJob job_;
  JobSet::Membership membership_;  // after job_: leaves the set before the job goes
  ResponseBuilder builder_;
  bool stream_;
  bool started_ = false;
};

namespace {

std::string prompt_for_log(const std::vector<PreparedPrompt>& prompts) {
  std::string text;
  for (const PreparedPrompt& p : prompts) {
    if (!text.empty()) text += " | ";
    text += p.text;
  }
  return text;
}

}  // namespace

Reply HttpServer::handle_generation(const HttpRequest& req, RequestLog& log, const Wakeup& wakeup, Endpoint endpoint) {
  ServingModel& model = ready_model();
  GenerationRequest request = read_generation_request(req.body, endpoint);
  log.model = request.model;
  if (request.model != model.name()) throw model_not_found(request.model);
  // A request the queue could never hold would get 429 forever: it is a bad request instead.
  const auto prompts_count = static_cast<int64_t>(endpoint == Endpoint::Completions ? request.prompts.size() : 1);
  if (prompts_count * request.n > options_.max_queue) {
    throw invalid_request("this request needs " + std::to_string(prompts_count * request.n) + " sequences (" +
                              std::to_string(prompts_count) + " prompts x n = " + std::to_string(request.n) +
                              ") but the server queues at most " + std::to_string(options_.max_queue),
                          "n");
  }
  PreparedGeneration prepared = model.preparer().prepare_generation(request);
  if (access_log_.log_prompts()) log.prompt = prompt_for_log(prepared.prompts);
  auto response =
      std::make_unique<GenerationResponse>(*this, model, request, prepared.prompts, std::move(prepared.constraint), wakeup);
  if (!response->submit()) throw queue_full();
  return response;
}

}  // namespace peregrine::server
