// The lab's runs (lab.h): checked on a preparing thread, run on the lab's own thread, one at a time.
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/offloaded_response.h"
#include "server/openai_request.h"

namespace peregrine::server {
namespace {

ApiError lab_busy() {
  return ApiError(429, "The lab runs one experiment at a time and one is running; retry when it is done",
                  "rate_limit_error", std::nullopt, "lab_busy");
}

}  // namespace

Reply HttpServer::handle_lab_run(const HttpRequest& req, std::string_view experiment, const Wakeup& wakeup) {
  ServingModel& model = ready_model();
  LabJob job = lab_.prepare(experiment, model, parse_body(req.body));  // 400 before any work
  if (!lab_.try_begin()) throw lab_busy();
  auto work = [this, job = std::move(job)](RequestLog&) -> Reply {
    struct Release {
      Lab& lab;
      ~Release() { lab.end(); }
    } release{lab_};
    try {
      return json_response(200, job());
    } catch (const ApiError& e) {
      return error_response(e);
    } catch (const std::exception& e) {
      return error_response(server_error(std::string("lab run failed: ") + e.what()));
    }
  };
  std::unique_ptr<OffloadedResponse> pending = OffloadedResponse::start(*lab_pool_, std::move(work), wakeup, false);
  if (!pending) {
    lab_.end();
    throw lab_busy();
  }
  return pending;
}

}  // namespace peregrine::server
