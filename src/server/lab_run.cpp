#include "server/lab_run.h"

#include <time.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace peregrine::server::lab {
namespace {

// What a run starts from when the page gives no prompt: the demo model's kind of text.
constexpr const char* kDefaultPrompt = "It is a truth universally acknowledged, that a single man in possession";

// State the lab's thread and the engine's slices share.
struct Shared {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  LabRun run;
  std::string error;
};

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace

int64_t int_field(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  return read_int(body, name, lo, hi).value_or(fallback);
}

std::vector<TokenId> prompt_field(ServingModel& model, const nlohmann::json& body, int64_t max_tokens) {
  const std::optional<std::string> given = read_string(body, "prompt");
  std::vector<TokenId> ids = model.preparer().tokenize_prompt(given.value_or(kDefaultPrompt), true);
  if (ids.empty()) throw invalid_request("'prompt' makes no tokens", "prompt");
  if (!given && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  if (static_cast<int64_t>(ids.size()) > max_tokens) {
    throw invalid_request("'prompt' is " + std::to_string(ids.size()) + " tokens; this experiment takes at most " +
                              std::to_string(max_tokens),
                          "prompt");
  }
  return ids;
}

std::vector<TokenId> prompt_of_length(std::vector<TokenId> ids, int64_t n) {
  const std::vector<TokenId> base = ids;
  const size_t skip = base.size() > 1 ? 1 : 0;  // repeat the text, not the BOS
  for (size_t i = 0; static_cast<int64_t>(ids.size()) < n; ++i) ids.push_back(base[skip + i % (base.size() - skip)]);
  ids.resize(static_cast<size_t>(n));
  return ids;
}

Model& local_model(ServingModel& model) {
  Model* m = model.local_model();
  if (m == nullptr) {
    throw ApiError(409, "the lab runs the model only when it is whole in this process (not on a layout)",
                   "invalid_request_error", std::nullopt, "lab_unavailable");
  }
  return *m;
}

EngineConfig lab_config(const Engine& serving, int64_t tokens, int64_t seqs) {
  const EngineConfig& s = serving.config();
  EngineConfig c;
  c.kv_type = s.kv_type;
  c.block_size = s.block_size;
  const int64_t positions = std::min(tokens, Lab::kMaxLabKvTokens);
  // Each sequence may hold a partly filled block, and speculation a few positions beyond.
  c.kv_blocks = (positions + c.block_size - 1) / c.block_size + seqs * 2 + 2;
  c.prefix_caching = false;
  c.scheduler.max_batched_tokens = Lab::kLabStepTokens;
  c.scheduler.max_seqs = seqs;
  c.proposer = nullptr;
  c.spec_adaptive = false;
  return c;
}

Request lab_request(std::vector<TokenId> prompt, int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

LabRun run_interleaved(Engine& serving, EngineCore& core, const std::atomic<bool>& stopping, double seconds,
                       std::function<void(LabStep&)> after_step) {
  using Clock = std::chrono::steady_clock;
  auto shared = std::make_shared<Shared>();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  // Runs on the engine thread, once after each serving step; the core is touched only here until
  // `done`, and the lab's thread waits for that before it goes on.
  auto slice = [shared, &serving, &core, &stopping, deadline, start, after_step]() -> bool {
    auto finish = [&](bool truncated) {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->run.truncated = truncated;
      shared->run.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      shared->done = true;
      shared->done_cv.notify_all();
      return false;
    };
    if (!core.has_work()) return finish(false);
    if (stopping.load() || Clock::now() > deadline) return finish(true);
    const EngineStats busy = serving.stats();
    LabStep step;
    const Clock::time_point t0 = Clock::now();
    const double cpu0 = thread_cpu_ms();
    try {
      step.events = core.step();
    } catch (const std::exception& e) {
      shared->error = e.what();
      return finish(true);
    }
    step.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    step.cpu_ms = thread_cpu_ms() - cpu0;
    if (after_step) after_step(step);
    if (busy.running + busy.waiting > 0) shared->run.under_load = true;
    shared->run.steps.push_back(std::move(step));
    return true;
  };
  // The lab's previous slice (one run at a time: no one else interleaves) signals its end from
  // inside its last call, so the engine may not have released it yet: wait for that, briefly.
  for (int tries = 0; !serving.interleave(slice); ++tries) {
    if (tries >= 2000 || stopping.load()) throw not_ready();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->done_cv.wait(lock, [&] { return shared->done; });
  if (!shared->error.empty()) throw server_error("lab run: " + shared->error);
  return std::move(shared->run);
}

}  // namespace peregrine::server::lab
