#include "server/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace peregrine::server {
namespace {

// Prometheus float formatting: the shortest text that reads back as the same double (so bucket
// bounds print as 0.005, not 0.0050000000000000001).
std::string number(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value, const std::string& labels = "") {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += " " + number(value) + "\n";
}

void gauge(std::string& out, const std::string& name, const std::string& help, double value) {
  header(out, name, "gauge", help);
  sample(out, name, value);
}

void counter(std::string& out, const std::string& name, const std::string& help, double value) {
  header(out, name, "counter", help);
  sample(out, name, value);
}

// Bucket bounds as vLLM has them, with finer low buckets: a CPU engine on a small model answers
// in milliseconds.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kItlBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                        0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBounds = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                        20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", static_cast<double>(cumulative), "le=\"" + number(bounds_[i]) + "\"");
  }
  sample(out, name + "_bucket", static_cast<double>(count_), "le=\"+Inf\"");
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", static_cast<double>(count_));
}

void RecentWindow::observe(double v) {
  values_[next_] = v;
  next_ = (next_ + 1) % kCapacity;
  n_ = std::min(n_ + 1, kCapacity);
}

double RecentWindow::quantile(double q) const {
  if (n_ == 0) return 0;
  std::array<double, kCapacity> sorted = values_;
  const auto end = sorted.begin() + static_cast<std::ptrdiff_t>(n_);
  const auto k = static_cast<std::ptrdiff_t>(q * static_cast<double>(n_ - 1) + 0.5);
  std::nth_element(sorted.begin(), sorted.begin() + k, end);
  return sorted[static_cast<size_t>(k)];
}

Metrics::Metrics() : ttft_(kTtftBounds), itl_(kItlBounds), e2e_(kE2eBounds) {
  for (const char* reason : {"stop", "length", "abort", "error"}) finished_[reason] = 0;
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void Metrics::observe_token(bool first, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_tokens_;
  (first ? ttft_ : itl_).observe(seconds);
  (first ? recent_ttft_ : recent_itl_).observe(seconds);
}

RecentLatency Metrics::recent_latency() const {
  std::lock_guard<std::mutex> lock(mu_);
  RecentLatency r;
  r.ttft_p50 = recent_ttft_.quantile(0.5);
  r.ttft_p90 = recent_ttft_.quantile(0.9);
  r.itl_p50 = recent_itl_.quantile(0.5);
  r.itl_p90 = recent_itl_.quantile(0.9);
  r.ttft_samples = recent_ttft_.size();
  r.itl_samples = recent_itl_.size();
  return r;
}

void Metrics::observe_finish(RequestFinish finish, double e2e_seconds) {
  const char* reason = finish == RequestFinish::Cancelled ? "abort" : request_finish_name(finish);
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
  e2e_.observe(e2e_seconds);
}

void Metrics::count_http(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[status];
}

namespace {

// Verifications by how many proposed tokens were accepted, as a Prometheus histogram (le = the
// accepted count; the proposal count K bounds it).
void accepted_length_histogram(std::string& out, const EngineStats& e) {
  const std::string name = "peregrine_spec_accepted_length";
  header(out, name, "histogram", "Speculative decoding: proposed tokens accepted per verification");
  int64_t cumulative = 0, sum = 0, last = 0;
  for (size_t n = 0; n < e.accepted_length.size(); ++n) {
    if (e.accepted_length[n] > 0) last = static_cast<int64_t>(n);
  }
  for (int64_t n = 0; n <= last && !e.accepted_length.empty(); ++n) {
    cumulative += e.accepted_length[static_cast<size_t>(n)];
    sum += n * e.accepted_length[static_cast<size_t>(n)];
    sample(out, name + "_bucket", static_cast<double>(cumulative), "le=\"" + std::to_string(n) + "\"");
  }
  sample(out, name + "_bucket", static_cast<double>(cumulative), "le=\"+Inf\"");
  sample(out, name + "_sum", static_cast<double>(sum), "");
  sample(out, name + "_count", static_cast<double>(cumulative), "");
}

}  // namespace

std::string Metrics::render(const EngineStats* engine) const {
  std::string out;
  const EngineStats none;
  const EngineStats& e = engine != nullptr ? *engine : none;
  gauge(out, "peregrine_model_ready", "1 once the model is loaded and the engine serves", engine != nullptr ? 1 : 0);
  gauge(out, "peregrine_requests_running", "Sequences in the engine's running batch", static_cast<double>(e.running));
  gauge(out, "peregrine_requests_waiting", "Sequences waiting for admission", static_cast<double>(e.waiting));
  gauge(out, "peregrine_kv_blocks_used", "KV cache blocks held by sequences (cached-only prefix blocks excluded)",
        static_cast<double>(e.kv_blocks_used));
  gauge(out, "peregrine_kv_blocks_total", "KV cache blocks", static_cast<double>(e.kv_blocks_total));
  gauge(out, "peregrine_kv_cache_usage_perc", "Share of KV cache blocks held by sequences (0..1)", e.kv_usage);
  counter(out, "peregrine_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache",
          static_cast<double>(e.prefix_queried_tokens));
  counter(out, "peregrine_prefix_cache_hits_total", "Prompt tokens found in the prefix cache",
          static_cast<double>(e.prefix_hit_tokens));
  gauge(out, "peregrine_prefix_cache_hit_rate", "prefix_cache_hits_total / prefix_cache_queries_total", e.prefix_hit_rate);
  counter(out, "peregrine_num_preemptions_total", "Sequences preempted (to be recomputed)", static_cast<double>(e.preemptions));
  counter(out, "peregrine_engine_steps_total", "Forward passes run by the engine", static_cast<double>(e.steps));
  counter(out, "peregrine_spec_draft_tokens_total", "Speculative decoding: tokens proposed and verified",
          static_cast<double>(e.draft_tokens));
  counter(out, "peregrine_spec_accepted_tokens_total", "Speculative decoding: proposed tokens accepted",
          static_cast<double>(e.accepted_tokens));
  counter(out, "peregrine_spec_draft_passes_total", "Speculative decoding: the proposer's model passes",
          static_cast<double>(e.draft_passes));
  counter(out, "peregrine_grammar_masked_rows_total", "Constrained decoding: logits rows masked to a grammar",
          static_cast<double>(e.grammar_rows));
  counter(out, "peregrine_grammar_seconds_total", "Constrained decoding: time spent masking rows and advancing states",
          e.grammar_ms / 1000.0);
  accepted_length_histogram(out, e);

  std::lock_guard<std::mutex> lock(mu_);
  counter(out, "peregrine_prompt_tokens_total", "Prompt tokens of accepted requests", static_cast<double>(prompt_tokens_));
  counter(out, "peregrine_generation_tokens_total", "Generated tokens", static_cast<double>(generation_tokens_));
  header(out, "peregrine_request_success_total", "counter", "Finished requests (choices) by finish reason");
  for (const auto& [reason, n] : finished_) {
    sample(out, "peregrine_request_success_total", static_cast<double>(n), "finished_reason=\"" + reason + "\"");
  }
  header(out, "peregrine_http_responses_total", "counter", "HTTP responses by status code");
  for (const auto& [status, n] : http_) {
    sample(out, "peregrine_http_responses_total", static_cast<double>(n), "status=\"" + std::to_string(status) + "\"");
  }
  ttft_.render(out, "peregrine_time_to_first_token_seconds", "Time from arrival to the first generated token");
  itl_.render(out, "peregrine_inter_token_latency_seconds", "Time between consecutive generated tokens");
  e2e_.render(out, "peregrine_e2e_request_latency_seconds", "Time from arrival to the end of a request");
  return out;
}

}  // namespace peregrine::server
