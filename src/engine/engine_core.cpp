#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "engine/grammar_step.h"
#include "util/error.h"

namespace peregrine {
namespace {

// The tokens that end generation (EOS, EOT, ...): a constrained request may sample them only
// where its text is complete.
std::vector<TokenId> end_of_generation_ids(const Tokenizer* tokenizer) {
  std::vector<TokenId> out;
  if (tokenizer == nullptr) return out;
  for (TokenId t = 0; t < tokenizer->n_vocab(); ++t) {
    if (tokenizer->is_end_of_generation(t)) out.push_back(t);
  }
  return out;
}

// One batch of every scheduled chunk. Logits are wanted for every row from a sequence's last
// committed token on: its next token, and one verification row per draft token.
void build_batch(const SchedulerOutput& work, Batch& batch) {
  batch.clear();
  for (const ScheduledChunk& c : work.chunks) {
    const Sequence& s = *c.seq;
    const int64_t last_committed = static_cast<int64_t>(s.tokens.size()) - 1;
    for (int64_t p = s.n_computed; p < s.n_computed + c.n_tokens; ++p) {
      batch.add(s.token_at(p), static_cast<int32_t>(p), s.seq_id(), p >= last_committed);
    }
  }
}

}  // namespace

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
    : EngineCore(std::make_unique<LocalRunner>(model), nullptr, tokenizer, std::move(config)) {}

EngineCore::EngineCore(ModelRunner& runner, const Tokenizer* tokenizer, EngineConfig config)
    : EngineCore(nullptr, &runner, tokenizer, std::move(config)) {}

EngineCore::EngineCore(std::unique_ptr<LocalRunner> local, ModelRunner* runner, const Tokenizer* tokenizer,
                       EngineConfig config)
    : local_(std::move(local)),
      runner_(runner != nullptr ? *runner : *local_),
      tokenizer_(tokenizer),
      config_(std::move(config)),
      kv_(runner_.kv_shape(), config_.kv_type, config_.kv_blocks, config_.block_size),
      blocks_(kv_, config_.prefix_caching),
      scheduler_(config_.scheduler, blocks_,
                 StepBudgetConfig{config_.max_step_ms, config_.min_prefill_chunk, runner_.max_in_flight()},
                 DraftPolicyConfig{config_.spec_tokens, config_.spec_max_batch, config_.spec_adaptive}),
      end_of_generation_(end_of_generation_ids(tokenizer)) {
  check_config();
  // A prefill lane ships each finished prompt's blocks whole: none may be given back before.
  if (runner_.prefill_lane() == nullptr) blocks_.set_window(runner_.config().kv_window());
  runner_.bind_cache(kv_);
}

EngineCore::~EngineCore() {
  // Steps still in flight are collected (and dropped), so the runner is ready for the next engine.
  try {
    for (; !flights_.empty(); flights_.pop_front()) runner_.collect();
    if (prefill_) runner_.prefill_lane()->collect();
  } catch (const std::exception&) {
    // A failed runner has nothing left to collect.
  }
  runner_.unbind_cache(kv_);
}

void EngineCore::check_config() const {
  if (config_.proposer && (config_.spec_tokens < 1 || config_.spec_tokens > kMaxSpecTokens)) {
    throw UsageError("speculation: " + std::to_string(config_.spec_tokens) + " draft tokens per step is outside [1, " +
                     std::to_string(kMaxSpecTokens) + "]");
  }
}

std::optional<std::string> EngineCore::validate(const Request& r) const {
  const ModelConfig& c = runner_.config();
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
  if (r.grammar && r.grammar->trie().n_vocab() != c.n_vocab) {
    return "the grammar was prepared for a vocabulary of " + std::to_string(r.grammar->trie().n_vocab()) +
           " tokens, the model has " + std::to_string(c.n_vocab);
  }
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
  if (auto problem = failure_ ? failure_ : validate(request)) {
    RequestEvent ev;
    ev.id = id;
    ev.finish = RequestFinish::Error;
    ev.error = *problem;
    pending_errors_.emplace_back(std::move(ev), std::move(on_event));
    return;
  }
  Live live;
  live.seq = std::make_unique<Sequence>(id, std::move(request), arrivals_++);
  if (live.seq->request.grammar) {
    try {
      start_grammar(*live.seq);
    } catch (const GrammarError& e) {
      RequestEvent ev;
      ev.id = id;
      ev.finish = RequestFinish::Error;
      ev.client_error = true;
      ev.error = e.what();
      pending_errors_.emplace_back(std::move(ev), std::move(on_event));
      return;
    }
  }
  live.on_event = std::move(on_event);
  Sequence* seq = live.seq.get();
  live_.emplace(id, std::move(live));
  scheduler_.add(seq);
}

// The grammar's start state. A prompt of control tokens only (BOS) means the output starts the
// text, where a SentencePiece detokenizer drops the first token's leading space: the grammar
// sees the text without it.
void EngineCore::start_grammar(Sequence& s) const {
  s.grammar.emplace(s.request.grammar->start());
  const std::vector<TokenId>& p = s.request.prompt;
  s.grammar_strips_space = tokenizer_ != nullptr && tokenizer_->add_space_prefix() &&
                           std::all_of(p.begin(), p.end(), [&](TokenId t) { return tokenizer_->is_control(t); });
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
  if (config_.proposer) config_.proposer->on_finish(*it->second.seq);
  scheduler_.remove(it->second.seq.get());
  trace_.release(id);
  live_.erase(it);
  ++counters_.finished;
}

// One iteration: settle → schedule → launch → land.
std::vector<RequestEvent> EngineCore::step() {
  std::vector<RequestEvent> out;
  settle(out);
  SchedulerOutput work = schedule();
  launch(work, out);
  land_due(work.empty(), out);
  return out;
}

// What is already decided: requests that failed validation, cancellations (a sequence in flight
// once it lands), and a prompt step of the prefill lane that finished (disaggregated
// prefill/decode: its sequences' first tokens are out and they decode from this step on).
void EngineCore::settle(std::vector<RequestEvent>& out) {
  for (auto& [ev, cb] : pending_errors_) {
    if (cb) cb(ev);
    out.push_back(std::move(ev));
    ++counters_.finished;
  }
  pending_errors_.clear();

  std::vector<RequestId> cancelled;
  for (auto& [id, live] : live_) {
    if (live.cancel_requested && !live.seq->in_flight) cancelled.push_back(id);
  }
  for (RequestId id : cancelled) {
    RequestEvent ev;
    ev.id = id;
    ev.finish = RequestFinish::Cancelled;
    emit(live_.at(id), std::move(ev), out);
    finish(id);
  }
  if (prefill_ && runner_.prefill_lane()->done()) land(Lane::Prefill, out);
}

// Drafts first (they count against the token budget), then the scheduler's chunks. While the
// prefill lane is busy, only decodes are scheduled (nothing new could start there).
SchedulerOutput EngineCore::schedule() {
  if (config_.proposer) propose();
  SchedulerOutput work = scheduler_.schedule(runner_.prefill_lane() != nullptr && prefill_);
  for (Sequence* s : work.preempted) {
    trace_.release(s->id);
    s->clear_draft();
    if (config_.proposer) config_.proposer->on_commit(*s, {});
  }
  return work;
}

// Runs the proposer on the drafts the scheduler chose.
void EngineCore::propose() {
  const DraftChoice& drafts = scheduler_.choose_drafts(runner_.config().context_length);
  if (drafts.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    config_.proposer->propose(drafts.seqs, drafts.max_tokens);
  } catch (const std::exception&) {
    // A proposer that fails costs this step's speculation, never a request.
    for (Sequence* s : drafts.seqs) s->clear_draft();
    return;
  }
  scheduler_.drafts().observe_proposer(
      drafts.k, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  // A proposer's bad output costs speed, never correctness: drop what cannot be verified.
  for (size_t i = 0; i < drafts.seqs.size(); ++i) {
    Sequence& s = *drafts.seqs[i];
    const bool valid = s.draft.size() == s.draft_q.size() && static_cast<int64_t>(s.draft.size()) <= drafts.max_tokens[i] &&
                       std::all_of(s.draft.begin(), s.draft.end(),
                                   [&](TokenId t) { return t >= 0 && t < runner_.config().n_vocab; });
    if (!valid) s.clear_draft();
    // Drafts the grammar refuses could only be rejected: do not spend the forward pass on them.
    if (s.grammar && !s.draft.empty()) {
      try {
        cut_draft_to_grammar(s, grammar_end_tokens(s, end_of_generation_));
      } catch (const std::exception&) {
        s.clear_draft();  // the step itself reports it
      }
    }
  }
}

// Starts the plan: with a prefill lane its prompt chunks go there (first, so the decodes run beside
// them) and the decodes stay in `plan`; the rest runs on the runner.
void EngineCore::launch(SchedulerOutput& work, std::vector<RequestEvent>& out) {
  if (runner_.prefill_lane() != nullptr) {
    SchedulerOutput prompts;
    std::erase_if(work.chunks, [&](const ScheduledChunk& c) {
      if (c.seq->phase == SeqPhase::Decode) return false;
      prompts.chunks.push_back(c);
      prompts.n_tokens += c.n_tokens;
      work.n_tokens -= c.n_tokens;
      return true;
    });
    if (!prompts.empty()) start(prompts, Lane::Prefill, out);
    if (!work.empty() && prefill_) ++counters_.steps_beside_prefill;
  }
  if (!work.empty()) start(work, Lane::Main, out);
}

// Collects the oldest step once the pipeline is full, or when nothing new started; with nothing
// in flight but a prompt step, waits for that.
void EngineCore::land_due(bool nothing_launched, std::vector<RequestEvent>& out) {
  const int64_t depth = std::max(1, runner_.max_in_flight());
  if (!flights_.empty() && (static_cast<int64_t>(flights_.size()) >= depth || nothing_launched)) {
    land(Lane::Main, out);
  } else if (nothing_launched && flights_.empty() && prefill_) {
    land(Lane::Prefill, out);
  }
}

// Starts the step of `plan` on the runner or its prefill lane; its sequences are in flight until
// it lands.
void EngineCore::start(const SchedulerOutput& work, Lane lane, std::vector<RequestEvent>& out) {
  Flight f;
  f.lane = lane;
  f.work = work;
  build_batch(work, f.batch);
  for (const ScheduledChunk& c : work.chunks) f.prefill_tokens += c.seq->phase == SeqPhase::Prefill ? c.n_tokens : 0;
  f.start = std::chrono::steady_clock::now();
  try {
    if (lane == Lane::Prefill) {
      runner_.prefill_lane()->submit(f.batch, kv_);
    } else {
      runner_.submit(f.batch, kv_);
    }
  } catch (const RunnerFailure& e) {
    fail_everything(e.what(), out);
    return;
  } catch (const std::exception& e) {
    fail_chunks(work, e.what(), out);
    return;
  }
  for (const ScheduledChunk& c : work.chunks) c.seq->in_flight = true;
  if (lane == Lane::Prefill) {
    prefill_ = std::move(f);
    return;
  }
  flights_.push_back(std::move(f));
  counters_.max_steps_in_flight = std::max(counters_.max_steps_in_flight, static_cast<int64_t>(flights_.size()));
}

// The model rejected the batch (a bug, not user input): end its requests, keep serving others.
void EngineCore::fail_chunks(const SchedulerOutput& work, const std::string& what, std::vector<RequestEvent>& out) {
  for (const ScheduledChunk& c : work.chunks) {
    c.seq->in_flight = false;
    RequestEvent ev;
    ev.id = c.seq->id;
    ev.finish = RequestFinish::Error;
    ev.error = std::string("forward pass failed: ") + what;
    emit(live_.at(c.seq->id), std::move(ev), out);
    finish(c.seq->id);
  }
}

// Collects the oldest step in flight (Lane::Prefill: the prefill lane's prompt step, waiting for
// it if need be) and commits what it computed: sampled tokens, verified drafts, finished requests.
void EngineCore::land(Lane lane, std::vector<RequestEvent>& out) {
  Flight f = lane == Lane::Prefill ? std::move(*prefill_) : std::move(flights_.front());
  if (lane == Lane::Prefill) {
    prefill_.reset();
  } else {
    flights_.pop_front();
  }
  StepResult r;
  try {
    r = lane == Lane::Prefill ? runner_.prefill_lane()->collect() : runner_.collect();
  } catch (const RunnerFailure& e) {
    fail_everything(e.what(), out);
    return;
  } catch (const std::exception& e) {
    fail_chunks(f.work, e.what(), out);
    return;
  }
  commit(f, r, out);
}

// The runner cannot go on: every live request ends with the reason, and so will every later one.
void EngineCore::fail_everything(const std::string& reason, std::vector<RequestEvent>& out) {
  failure_ = reason;
  flights_.clear();
  prefill_.reset();
  for (auto& [id, live] : live_) live.seq->in_flight = false;
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (RequestId id : ids) {
    RequestEvent ev;
    ev.id = id;
    ev.finish = RequestFinish::Error;
    ev.error = reason;
    emit(live_.at(id), std::move(ev), out);
    finish(id);
  }
}

EngineStats EngineCore::stats() const {
  EngineStats st = counters_;
  st.running = static_cast<int64_t>(scheduler_.running().size());
  st.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  st.kv_blocks_total = kv_.n_blocks();
  st.kv_blocks_used = blocks_.n_used_blocks();
  st.kv_blocks_free = kv_.n_free_blocks();
  st.kv_usage = static_cast<double>(st.kv_blocks_used) / static_cast<double>(st.kv_blocks_total);
  const PrefixCacheStats p = blocks_.prefix_stats();
  st.prefix_queried_tokens = p.queried_tokens;
  st.prefix_hit_tokens = p.hit_tokens;
  st.prefix_hit_rate = p.hit_rate();
  st.preemptions = scheduler_.n_preemptions();
  st.max_seqs = config_.scheduler.max_seqs;
  if (config_.proposer) st.draft_passes = config_.proposer->passes();
  if (const StepCostModel& cost = scheduler_.budget().cost(); cost.ready()) {
    st.step_cost_ms_per_prefill_token = cost.ms_per_prefill_token();
    st.step_cost_ms_per_decode_row = cost.ms_per_decode_row();
  }
  return st;
}

}  // namespace peregrine
