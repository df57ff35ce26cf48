// `peregrine serve`: the OpenAI-compatible HTTP server. Binds first (so /health answers 503
// while the model loads), loads the model, prints one ready line to stdout, serves until SIGTERM
// or SIGINT, then drains: no new connections, in-flight requests get --shutdown-grace seconds to
// finish before they are cancelled, exit 0.
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "chat/chat_template.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_host.h"
#include "cli/model_loading.h"
#include "cli/serve_access_flags.h"
#include "server/http_server.h"
#include "server/serving_model.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

// Every connection is a file descriptor: raise the soft limit to the hard one, and keep the
// connection cap below it (with room for the model file, logs and sockets being refused).
int64_t fit_connections_to_fd_limit(int64_t wanted) {
  constexpr int64_t kSpareDescriptors = 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return wanted;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  const auto room = static_cast<int64_t>(limit.rlim_cur) - kSpareDescriptors;
  if (limit.rlim_cur == RLIM_INFINITY || wanted <= room) return wanted;
  std::fprintf(stderr, "[serve] --max-connections %lld lowered to %lld (open-file limit %llu)\n",
               static_cast<long long>(wanted), static_cast<long long>(room),
               static_cast<unsigned long long>(limit.rlim_cur));
  return std::max<int64_t>(room, 1);
}

// After a process of the layout failed (reported on stderr, every request ended with the reason):
// give the open streams a moment to deliver their error, then end every process of the job.
void end_job_on_failure(dist::DistSession& session, server::HttpServer& http) {
  session.runner().set_on_failure([&session, &http](const std::string&) {
    http.refuse_new_work();
    std::thread([&session, &http] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::fprintf(stderr, "[serve] stopping: the model's processes failed\n");
      http.shutdown(std::chrono::milliseconds(0));
      session.abort_job(1);
    }).detach();
  });
}

// Read bandwidth and peak multiply-add rates, measured small and quick (a fraction of a second):
// good enough to place the live view's steps, not a benchmark (`peregrine roofline` is that).
server::MachineRoof probe_machine_roof(const ExecutionContext& context) {
  const MachineBounds b = context.measure_bounds({.bandwidth_bytes = int64_t{64} << 20, .bandwidth_passes = 3,
                                                  .peak_runs = 5});
  return {b.bandwidth.best, b.peak_f32, b.peak_int8};
}

}  // namespace

int serve_command(const Args& args) {
  std::optional<std::string> model_path, tokenizer, served_name, chat_template_file, weight_type;
  std::string host = "127.0.0.1";
  int64_t port = 8080, max_queue = 256, max_connections = 1024, max_body_bytes = 8 << 20, io_threads = 2;
  int64_t prepare_threads = 2, prepare_queue = 256;
  int64_t max_inflight_body_bytes = 256 << 20;
  ServeAccessFlags access;
  double grace_s = 10, request_timeout_s = 30, live_view_stall_s = 10;
  int64_t live_view_queue_bytes = 64 << 10;
  bool log_prompts = false, chat_parse_special = false, no_webui = false;
  EngineFlags engine;
  ArgParser p("serve", "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models,\n"
                       "/health, /metrics, /tokenize, /detokenize (see docs/api.md).");
  p.positional("MODEL", &model_path, kModelHelp);
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--type", &weight_type, "TYPE", kLoadTypeHelp);
  p.option("--host", &host, "ADDR", "address to bind (0.0.0.0 for every interface)");
  p.option("--port", &port, "N", "TCP port; 0 picks a free one", 0, 65535);
  access.add_to(p);
  p.option("--served-model-name", &served_name, "NAME", "the model's name in the API (default: the file's stem or the folder's name)");
  p.option("--max-queue", &max_queue, "N", "sequences waiting for admission before new requests get 429", 1, 1 << 20);
  p.option("--chat-template", &chat_template_file, "FILE", "Jinja chat template overriding the model's");
  p.flag("--log-prompts", &log_prompts, "include prompt text in the access log");
  p.option("--shutdown-grace", &grace_s, "SECONDS", "on SIGTERM/SIGINT, time in-flight requests get to finish", 0, 3600);
  p.option("--max-connections", &max_connections, "N", "open connections at most; beyond, new ones get 503", 1,
           1 << 20);
  p.option("--request-timeout", &request_timeout_s, "SECONDS",
           "a request's head and body must arrive within this (408)", 0.1, 3600);
  p.option("--max-body-bytes", &max_body_bytes, "N", "request bodies larger than this get 413", 1024, int64_t{1} << 30);
  p.option("--max-inflight-body-bytes", &max_inflight_body_bytes, "N",
           "request-body bytes held at once across all connections; beyond, new bodies get 503 (at least "
           "--max-body-bytes)",
           1024, int64_t{1} << 40);
  p.option("--io-threads", &io_threads, "N", "threads serving HTTP connections", 1, 64);
  p.option("--prepare-threads", &prepare_threads, "N",
           "threads preparing requests (JSON, chat templates, tokenizing, grammars) off the I/O threads", 1, 64);
  p.option("--prepare-queue", &prepare_queue, "N", "requests waiting for those threads; beyond, 503 with Retry-After",
           1, 1 << 20);
  p.flag("--chat-parse-special", &chat_parse_special,
         "parse special-token text inside chat messages as special tokens (unsafe: users can forge turns)");
  p.option("--live-view-queue-bytes", &live_view_queue_bytes, "N",
           "a live-view viewer's unsent bytes beyond which its frames are dropped", 1024, int64_t{64} << 20);
  p.option("--live-view-stall", &live_view_stall_s, "SECONDS",
           "a live-view viewer over its queue this long is disconnected (its slot freed)", 0.1, 3600);
  p.flag("--no-webui", &no_webui, "no web page at / (it is on by default: a chat and a live view of the engine)");
  engine.add_to(p);
  if (!p.parse(args)) return 0;
  const std::optional<QuantScheme> load_type = parse_weight_type(weight_type);

  std::optional<std::string> chat_template;
  if (chat_template_file) chat_template = read_file_bytes(*chat_template_file);

  // Where the model runs. A layout over several processes: every process loads its part first,
  // and every one but rank 0 only runs the steps rank 0 sends (no socket). One process: the model
  // loads after the socket is bound, so /health answers 503 meanwhile.
  engine.dist.check_spec(engine.spec);
  const std::shared_ptr<ExecutionContext> context = engine.backend.make_context();
  const auto load = [&] {
    return std::make_unique<ModelHost>(engine.dist, "serve",
                                       [&] { return open_model_arg(model_path, tokenizer, load_type); }, context);
  };
  std::unique_ptr<ModelHost> model_host;
  if (engine.dist.layout().distributed() || dist::detect_launch().launched) {
    model_host = load();
    if (model_host->worker()) return model_host->serve_steps();
  }

  // Signals are taken by sigwait below; block them before any thread exists so none inherits them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::ServerOptions options;
  options.host = host;
  options.port = static_cast<int>(port);
  access.apply(options);
  options.served_model_name = served_name.value_or(model_display_name(model_path));
  options.max_queue = max_queue;
  options.log_prompts = log_prompts;
  options.max_connections = fit_connections_to_fd_limit(max_connections);
  options.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  options.limits.body_bytes = static_cast<size_t>(max_body_bytes);
  if (max_inflight_body_bytes < max_body_bytes) {
    throw UsageError("--max-inflight-body-bytes must be at least --max-body-bytes (" + std::to_string(max_body_bytes) +
                     ")");
  }
  options.max_inflight_body_bytes = static_cast<size_t>(max_inflight_body_bytes);
  options.io_threads = static_cast<int>(io_threads);
  options.prepare_threads = static_cast<int>(prepare_threads);
  options.prepare_queue = static_cast<size_t>(prepare_queue);
  options.webui = !no_webui;
  options.live_view_queue_bytes = static_cast<size_t>(live_view_queue_bytes);
  options.live_view_stall = std::chrono::milliseconds(static_cast<int64_t>(live_view_stall_s * 1000));
  // The live view draws the steps under this machine's roof: a short probe before the model loads.
  if (options.webui) options.machine_roof = probe_machine_roof(*context);
  // Declared before the server: connections still held by the server when it goes may cancel
  // engine requests, so the model (and its engine) must outlive it.
  std::unique_ptr<server::ServingModel> model;
  server::HttpServer http(options);
  const int bound_port = http.bind();
  std::thread listener([&http] { http.listen(); });
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));

  try {
    auto config = [&](const Model& m) { return engine.engine_config(m, model_path, "[serve] "); };
    if (!model_host) {
      if (chat_template) ChatTemplate::parse(*chat_template);  // a bad --chat-template fails before the weights load
      model_host = load();
    }
    model = std::make_unique<server::ServingModel>(model_host->model(), model_host->runner(),
                                                   options.served_model_name, config, chat_template);
    if (model_host->distributed()) {
      end_job_on_failure(*model_host->session(), http);
      std::fprintf(stderr, "[serve] model on %s\n", model_host->describe().c_str());
    }
  } catch (...) {
    http.shutdown(std::chrono::milliseconds(0));
    listener.join();
    throw;
  }
  if (chat_parse_special) model->preparer().set_content_special_tokens(ContentSpecialTokens::Parse);
  http.set_model(model.get());
  std::printf("peregrine: serving %s on http://%s:%d\n", options.served_model_name.c_str(), host.c_str(), bound_port);
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  if (model_host->distributed()) {
    // The launcher signals every process of the job at once (a process failed, or the job is being
    // stopped): the other ranks are going away, so in-flight requests end now with the reason.
    dist::request_stop(signal_number);
    std::fprintf(stderr, "[serve] %s: stopping the layout; requests in flight end with an error\n",
                 signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  } else {
    std::fprintf(stderr, "[serve] %s: draining (grace %.1f s)\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM", grace_s);
  }
  http.shutdown(grace);
  listener.join();
  std::fprintf(stderr, "[serve] stopped\n");
  return 0;
}

}  // namespace peregrine::cli
