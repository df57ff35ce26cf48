// POST /v1/completions and /v1/chat/completions: parse, prepare, submit every choice to the
// engine, then either wait for the whole answer or stream it as Server-Sent Events. A streaming
// client that goes away is noticed when a write fails (or the socket stops being writable while
// nothing is produced), and its engine requests are cancelled at once, freeing their KV blocks.
#include <httplib.h>

#include "server/api_error.h"
#include "server/http_reply.h"
#include "server/http_server.h"
#include "server/response_builder.h"
#include "server/sse.h"

namespace peregrine::server {

// Keeps a job in the server's in-flight set (for shutdown) for exactly as long as it exists.
class HttpServer::JobRegistration {
 public:
  JobRegistration(HttpServer& server, GenerationJob* job) : server_(server), job_(job) { server_.register_job(job_); }
  ~JobRegistration() { server_.unregister_job(job_); }
  JobRegistration(const JobRegistration&) = delete;
  JobRegistration& operator=(const JobRegistration&) = delete;

 private:
  HttpServer& server_;
  GenerationJob* job_;
};

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string prompt_for_log(const std::vector<PreparedPrompt>& prompts) {
  std::string text;
  for (const PreparedPrompt& p : prompts) {
    if (!text.empty()) text += " | ";
    text += p.text;
  }
  return text;
}

}  // namespace

void HttpServer::handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  check_auth(req);
  ServingModel& model = ready_model();
  const nlohmann::json body = parse_body(req.body);
  const GenerationRequest request =
      endpoint == Endpoint::Completions ? parse_completion_request(body) : parse_chat_request(body);
  if (request.model != model.name()) throw model_not_found(request.model);
  const std::vector<PreparedPrompt> prompts = model.prepare(request);
  access_log_.note_prompt(res, prompt_for_log(prompts));

  auto job = std::make_unique<GenerationJob>(model.engine(), metrics_, admission_, request, prompts);
  auto registration = std::make_unique<JobRegistration>(*this, job.get());
  if (!job->submit()) throw queue_full();
  ResponseBuilder builder(request, prompts, model.tokenizer(), model.name());

  if (!request.stream) {
    while (!job->finished()) builder.accumulate(job->wait(kPollInterval));
    access_log_.note_tokens(res, builder.prompt_tokens(), builder.completion_tokens());
    send_json(res, 200, builder.response());
    return;
  }

  struct StreamState {
    std::unique_ptr<GenerationJob> job;
    std::unique_ptr<JobRegistration> registration;  // declared after job: unregisters first
    ResponseBuilder builder;
    AccessLog& log;
    const httplib::Response& res;
    bool started = false;
    bool ended = false;
    void note() { log.note_tokens(res, builder.prompt_tokens(), builder.completion_tokens()); }
  };
  auto state = std::make_shared<StreamState>(
      StreamState{std::move(job), std::move(registration), std::move(builder), access_log_, res});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!state->started) {
          state->started = true;
          out = state->builder.stream_start();
        } else {
          out = state->builder.stream_events(state->job->wait(kPollInterval));
          if (state->job->finished()) {
            out += state->builder.stream_end();
            state->ended = true;
          }
        }
        // An empty write would end the chunked body, so write only what there is.
        const bool alive = out.empty() ? sink.is_writable() : sink.write(out.data(), out.size());
        if (!alive) {
          state->job->cancel();  // the client is gone: free its KV blocks now
          state->note();
          return false;
        }
        if (state->ended) {
          state->note();
          sink.done();
        }
        return true;
      },
      [state](bool success) {
        if (!success) state->job->cancel();
      });
}

}  // namespace peregrine::server
