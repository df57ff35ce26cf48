#pragma once
// The client side of `peregrine bench-serve --url`: many concurrent streaming requests against an
// OpenAI-compatible server (POST /v1/completions with stream: true), timed from the client as
// vLLM's benchmark_serving does: time to the first streamed chunk, the gaps between chunks, the
// end of the stream, and the server's own token count from the usage chunk.
#include <cstdint>
#include <string>
#include <vector>

namespace peregrine::cli {

// "http://HOST:PORT[/BASE]". Only plain http: the benchmark measures the server, not TLS.
struct HttpEndpoint {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" without a trailing slash
};

// Throws std::runtime_error naming the URL when it is not of that form.
HttpEndpoint parse_http_url(const std::string& url);

struct LoadOptions {
  HttpEndpoint endpoint;
  std::string api_key;       // sent as "Authorization: Bearer KEY" when not empty
  int64_t concurrency = 1;   // requests in flight at most (one client thread each)
  double timeout_s = 600;    // per read; a stalled stream counts as an error after this
};

// One request of the workload: the JSON body (the caller sets stream and stream_options) and
// when it may start, in seconds after the run's start.
struct LoadRequest {
  std::string body;
  double arrival_s = 0;
};

struct LoadResult {
  bool ok = false;
  std::string error;                 // why not ok: transport error, HTTP status, error event, no [DONE]
  double sent_s = 0;                 // seconds after the run's start
  std::vector<double> chunk_times_s; // arrival of each chunk that carried a choice
  double done_s = 0;                 // end of the stream
  int64_t prompt_tokens = -1;        // from the usage chunk; -1 without one
  int64_t completion_tokens = -1;
  std::string finish_reason;
  std::string text;                  // the streamed text, joined
};

// Checks that the server answers GET {base}/v1/models and returns the first model's id.
// Throws std::runtime_error with the reason (refused, timed out, HTTP status, bad JSON).
std::string fetch_served_model(const LoadOptions& options);

// Runs every request: `concurrency` client threads each take the next request, wait for its
// arrival time, and stream it to the end. Returns one result per request, in order; never throws
// for a failed request (it is reported in its result).
std::vector<LoadResult> run_http_load(const LoadOptions& options, const std::vector<LoadRequest>& requests);

}  // namespace peregrine::cli
