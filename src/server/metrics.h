#pragma once
// Server metrics in the Prometheus text exposition format (version 0.0.4), named after vLLM's
// (prefix `peregrine_`): request and token counters, finish reasons, TTFT / inter-token /
// end-to-end latency histograms, plus the engine's gauges (running, waiting, KV blocks, prefix
// cache) read from EngineStats at scrape time. Thread-safe.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/request.h"

namespace peregrine::server {

// A cumulative histogram with fixed upper bounds (seconds), like prometheus_client's.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "# HELP/# TYPE" lines, then name_bucket{le=...}, name_sum, name_count.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1]: the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// The last kCapacity values of a latency, for a live view's percentiles (fixed memory).
class RecentWindow {
 public:
  static constexpr size_t kCapacity = 256;
  void observe(double v);
  // The q-quantile (0..1) of the values kept; 0 when there are none.
  double quantile(double q) const;
  size_t size() const { return n_; }

 private:
  std::array<double, kCapacity> values_{};
  size_t next_ = 0, n_ = 0;
};

// TTFT and inter-token latency of the last requests and tokens, in seconds.
struct RecentLatency {
  double ttft_p50 = 0, ttft_p90 = 0, itl_p50 = 0, itl_p90 = 0;
  size_t ttft_samples = 0, itl_samples = 0;
};

class Metrics {
 public:
  Metrics();

  void add_prompt_tokens(int64_t n);
  // One generated token of some request: counts it; the first one of a request observes TTFT
  // (seconds since arrival), the later ones inter-token latency.
  void observe_token(bool first, double seconds);
  // A request (one choice) ended; observes end-to-end latency.
  void observe_finish(RequestFinish finish, double e2e_seconds);
  void count_http(int status);
  RecentLatency recent_latency() const;

  // The whole exposition text. `engine` may be null while the model loads.
  std::string render(const EngineStats* engine) const;

 private:
  mutable std::mutex mu_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_;  // finish reason -> requests
  std::map<int, int64_t> http_;               // status -> responses
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  RecentWindow recent_ttft_;
  RecentWindow recent_itl_;
};

}  // namespace peregrine::server
