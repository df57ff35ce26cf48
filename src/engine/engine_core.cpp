#include "engine/engine_core.h"

#include <algorithm>
#include <limits>
#include <string>

#include "util/error.h"

namespace peregrine {

const char* request_finish_name(RequestFinish f) {
  switch (f) {
    case RequestFinish::Stop: return "stop";
    case RequestFinish::Length: return "length";
    case RequestFinish::Cancelled: return "cancelled";
    case RequestFinish::Error: return "error";
    case RequestFinish::None: break;
  }
  return "";
}

double EngineStats::slot_utilization() const {
  return steps > 0 && max_seqs > 0 ? static_cast<double>(slot_steps_used) / static_cast<double>(steps * max_seqs) : 0.0;
}

EngineCore::EngineCore(Model& model, const Tokenizer* tokenizer, EngineConfig config)
    : model_(model),
      tokenizer_(tokenizer),
      config_(config),
      kv_(model.config().kv_shape(), config.kv_type, config.kv_blocks, config.block_size),
      blocks_(kv_, config.prefix_caching),
      scheduler_(config.scheduler, blocks_) {}

std::optional<std::string> EngineCore::validate(const Request& r) const {
  const ModelConfig& c = model_.config();
  if (r.prompt.empty()) return "the prompt has no tokens";
  for (TokenId t : r.prompt) {
    if (t < 0 || t >= c.n_vocab) return "prompt token id " + std::to_string(t) + " is outside the vocabulary";
  }
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n >= c.context_length) {
    return "the prompt has " + std::to_string(n) + " tokens, leaving no room in the context length " +
           std::to_string(c.context_length);
  }
  if (r.max_tokens < 1) return "max_tokens must be at least 1";
  try {
    peregrine::validate(r.sampling);
  } catch (const UsageError& e) {
    return e.what();
  }
  // One more block than the longest the request can get: room for a copy-on-write of a shared
  // block. A request that fits alone is never starved: preemption frees everything else.
  const int64_t longest = std::min(c.context_length, n + r.max_tokens);
  if (blocks_.blocks_for(longest) + 1 > kv_.n_blocks()) {
    return "the request needs up to " + std::to_string(longest) + " tokens, more than the KV cache holds (" +
           std::to_string(kv_.n_blocks() * kv_.block_size()) + " tokens)";
  }
  return std::nullopt;
}

RequestId EngineCore::add_request(Request request, RequestEventCallback on_event) {
  while (live_.count(next_id_) != 0) ++next_id_;
  const RequestId id = next_id_++;
  add_request(id, std::move(request), std::move(on_event));
  return id;
}

void EngineCore::add_request(RequestId id, Request request, RequestEventCallback on_event) {
  if (id < 0 || id > std::numeric_limits<SeqId>::max() || live_.count(id) != 0) {
    throw UsageError("engine: request id " + std::to_string(id) + " is invalid or in use");
  }
  if (auto problem = validate(request)) {
    RequestEvent ev;
    ev.id = id;
    ev.finish = RequestFinish::Error;
    ev.error = *problem;
    pending_errors_.emplace_back(std::move(ev), std::move(on_event));
    return;
  }
  Live live;
  live.seq = std::make_unique<Sequence>(id, std::move(request), arrivals_++);
  live.on_event = std::move(on_event);
  Sequence* seq = live.seq.get();
  live_.emplace(id, std::move(live));
  scheduler_.add(seq);
}

bool EngineCore::cancel(RequestId id) {
  auto it = live_.find(id);
  if (it == live_.end() || it->second.cancel_requested) return false;
  it->second.cancel_requested = true;
  return true;
}

void EngineCore::emit(Live& live, RequestEvent&& ev, std::vector<RequestEvent>& out) {
  if (live.on_event) live.on_event(ev);
  out.push_back(std::move(ev));
}

void EngineCore::finish(RequestId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  scheduler_.remove(it->second.seq.get());
  live_.erase(it);
  ++counters_.finished;
}

std::vector<RequestEvent> EngineCore::step() {
  std::vector<RequestEvent> out;
  for (auto& [ev, cb] : pending_errors_) {
    if (cb) cb(ev);
    out.push_back(std::move(ev));
    ++counters_.finished;
  }
  pending_errors_.clear();

  std::vector<RequestId> cancelled;
  for (auto& [id, live] : live_) {
    if (live.cancel_requested) cancelled.push_back(id);
  }
  for (RequestId id : cancelled) {
    RequestEvent ev;
    ev.id = id;
    ev.finish = RequestFinish::Cancelled;
    emit(live_.at(id), std::move(ev), out);
    finish(id);
  }

  const SchedulerOutput plan = scheduler_.schedule();
  if (!plan.empty()) run_batch(plan, out);
  return out;
}

void EngineCore::run_batch(const SchedulerOutput& plan, std::vector<RequestEvent>& out) {
  batch_.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& s = *c.seq;
    const int64_t end = s.n_computed + c.n_tokens;
    for (int64_t p = s.n_computed; p < end; ++p) {
      batch_.add(s.tokens[static_cast<size_t>(p)], static_cast<int32_t>(p), s.seq_id(),
                 p == static_cast<int64_t>(s.tokens.size()) - 1);
    }
  }
  try {
    model_.forward(batch_, kv_, logits_);
  } catch (const std::exception& e) {
    // The model rejected the batch (a bug, not user input): end its requests, keep serving others.
    for (const ScheduledChunk& c : plan.chunks) {
      RequestEvent ev;
      ev.id = c.seq->id;
      ev.finish = RequestFinish::Error;
      ev.error = std::string("forward pass failed: ") + e.what();
      emit(live_.at(c.seq->id), std::move(ev), out);
      finish(c.seq->id);
    }
    return;
  }
  ++counters_.steps;
  counters_.computed_tokens += static_cast<int64_t>(batch_.size());
  counters_.slot_steps_used += static_cast<int64_t>(plan.chunks.size());

  const int64_t n_vocab = model_.config().n_vocab;
  size_t logit_row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    s.n_computed += c.n_tokens;
    blocks_.commit(s.seq_id(), s.tokens, s.n_computed);
    if (s.n_computed != static_cast<int64_t>(s.tokens.size())) continue;  // mid-prompt chunk
    const auto row = std::span<const float>(logits_).subspan(logit_row++ * static_cast<size_t>(n_vocab),
                                                              static_cast<size_t>(n_vocab));
    RequestEvent ev;
    ev.id = s.id;
    try {
      SampleResult r = s.sampler.sample(row, s.tokens);
      s.tokens.push_back(r.token);
      ++counters_.generated_tokens;
      ev.has_token = true;
      ev.token = r.token;
      ev.logprob = r.logprob;
      ev.top_logprobs = std::move(r.top);
      TokenOutcome o = process_token(s, r.token, tokenizer_, model_.config().context_length);
      ev.text = std::move(o.text);
      ev.finish = o.finish;
    } catch (const std::exception& e) {
      ev.finish = RequestFinish::Error;
      ev.error = std::string("sampling failed: ") + e.what();
    }
    const bool done = ev.finish != RequestFinish::None;
    emit(live_.at(s.id), std::move(ev), out);
    if (done) finish(s.id);
  }
}

EngineStats EngineCore::stats() const {
  EngineStats st = counters_;
  st.running = static_cast<int64_t>(scheduler_.running().size());
  st.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  st.kv_blocks_total = kv_.n_blocks();
  st.kv_blocks_used = blocks_.n_used_blocks();
  st.kv_usage = static_cast<double>(st.kv_blocks_used) / static_cast<double>(st.kv_blocks_total);
  const PrefixCacheStats p = blocks_.prefix_stats();
  st.prefix_queried_tokens = p.queried_tokens;
  st.prefix_hit_tokens = p.hit_tokens;
  st.prefix_hit_rate = p.hit_rate();
  st.preemptions = scheduler_.n_preemptions();
  st.max_seqs = config_.scheduler.max_seqs;
  return st;
}

}  // namespace peregrine
