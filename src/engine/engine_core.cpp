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
      scheduler_(config_.scheduler, blocks_),
      spec_policy_(config_.spec_tokens),
      end_of_generation_(end_of_generation_ids(tokenizer)) {
  check_config();
  if (runner_.releases_windowed_blocks()) blocks_.set_window(runner_.config().kv_window());
  runner_.bind_cache(kv_);
}

EngineCore::~EngineCore() {
  // Steps still in flight are collected (and dropped), so the runner is ready for the next engine.
  try {
    for (; !flights_.empty(); flights_.pop_front()) runner_.collect(logits_);
    if (prefill_) runner_.collect_prefill(logits_);
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
    if (live.cancel_requested && !live.seq->in_flight) cancelled.push_back(id);  // in flight: once it lands
  }
  for (RequestId id : cancelled) {
    RequestEvent ev;
    ev.id = id;
    ev.finish = RequestFinish::Cancelled;
    emit(live_.at(id), std::move(ev), out);
    finish(id);
  }

  // Disaggregated prefill/decode: a prompt step that finished lands first, so its sequences'
  // first tokens are out and they decode from this step on.
  const bool lanes = runner_.has_prefill_lane();
  if (prefill_ && runner_.prefill_done()) land(out, true);
  if (config_.proposer) propose();
  // A pipelined runner takes up to `depth` steps at once, each of other sequences: a step takes at
  // most its share of the sequences there are (up to max_seqs), so the stages stay busy with
  // micro-batches of about equal size.
  const int64_t depth = std::max(1, runner_.max_in_flight());
  int64_t seq_cap = INT64_MAX;
  if (depth > 1) {
    const int64_t active = std::min<int64_t>(
        config_.scheduler.max_seqs,
        static_cast<int64_t>(scheduler_.running().size() + scheduler_.waiting().size()));
    seq_cap = std::max<int64_t>(1, (active + depth - 1) / depth);
  }
  // While the prefill lane is busy, only decodes are scheduled (nothing new could start there).
  SchedulerOutput plan = scheduler_.schedule(token_budget(), seq_cap, lanes && prefill_);
  for (Sequence* s : plan.preempted) {
    trace_.release(s->id);
    s->clear_draft();
    if (config_.proposer) config_.proposer->on_commit(*s, {});
  }
  if (lanes) launch_prompts(plan, out);  // first, so the decodes run beside them
  if (!plan.empty()) launch(plan, out);
  // Collect the oldest step once the pipeline is full, or when nothing new could start.
  if (!flights_.empty() && (static_cast<int64_t>(flights_.size()) >= depth || plan.empty())) {
    land(out);
  } else if (plan.empty() && flights_.empty() && prefill_) {
    land(out, true);  // nothing decodes: wait for the prompt step
  }
  return out;
}

// This step's token budget: with a step-time budget, the running decodes (and their drafts) plus
// the prefill tokens the cost model says fit beside them. With no sequence decoding no stream
// waits on the step, so prompts take whole chunks (the time to their first token is all that is
// at stake then). Until the cost model has seen enough steps, streams get short chunks beside
// them (kWarmupChunks minimal chunks), not whole ones: a burst of arrivals at start would
// otherwise stall the first streams for seconds while the model learns.
int64_t EngineCore::token_budget() {
  constexpr int64_t kWarmupChunks = 4;
  const int64_t fixed = config_.scheduler.max_batched_tokens;
  if (config_.max_step_ms <= 0) return fixed;
  int64_t decode_rows = 0;
  for (const Sequence* s : scheduler_.running()) {
    if (!s->in_prefill()) decode_rows += s->n_to_schedule();
  }
  if (decode_rows == 0) return fixed;
  if (!cost_.ready()) return std::min(fixed, decode_rows + kWarmupChunks * config_.min_prefill_chunk);
  const int64_t prefill =
      std::max(config_.min_prefill_chunk, cost_.prefill_tokens_within(decode_rows, config_.max_step_ms));
  return std::min(fixed, decode_rows + prefill);
}

// Drafts for every running sequence that decodes, as many as its token budget, its max_tokens
// and the context allow (the scheduler may cut them further when the step's budget runs out).
void EngineCore::propose() {
  proposing_.clear();
  propose_max_.clear();
  const int64_t context = runner_.config().context_length;
  int64_t decoding = 0;
  for (Sequence* s : scheduler_.running()) {
    if (s->in_flight) continue;  // its drafts are being verified
    s->clear_draft();
    decoding += s->n_to_compute() == 1 ? 1 : 0;
  }
  if (decoding > config_.spec_max_batch) return;  // compute-bound: verification would not pay
  for (Sequence* s : scheduler_.running()) {
    if (s->in_flight || !s->request.speculate || s->n_to_compute() != 1) continue;
    if (s->spec_skip > 0) {
      --s->spec_skip;
      continue;
    }
    proposing_.push_back(s);
  }
  const auto n_spec = static_cast<int64_t>(proposing_.size());
  const int64_t k = n_spec == 0                ? 0
                    : config_.spec_adaptive ? spec_policy_.choose_k(decoding - n_spec, n_spec)
                                            : config_.spec_tokens;
  size_t kept = 0;
  for (Sequence* s : proposing_) {
    const int64_t room =
        std::min({k, s->request.max_tokens - s->n_generated() - 1, context - static_cast<int64_t>(s->tokens.size()) - 1});
    if (room < 1) continue;
    proposing_[kept++] = s;
    propose_max_.push_back(room);
  }
  proposing_.resize(kept);
  if (proposing_.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    config_.proposer->propose(proposing_, propose_max_);
  } catch (const std::exception&) {
    // A proposer that fails costs this step's speculation, never a request.
    for (Sequence* s : proposing_) s->clear_draft();
    return;
  }
  spec_policy_.observe_proposer(
      k, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  // A proposer's bad output costs speed, never correctness: drop what cannot be verified.
  for (size_t i = 0; i < proposing_.size(); ++i) {
    Sequence& s = *proposing_[i];
    const bool valid = s.draft.size() == s.draft_q.size() && static_cast<int64_t>(s.draft.size()) <= propose_max_[i] &&
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

// One batch of every scheduled chunk. Logits are wanted for every row from a sequence's last
// committed token on: its next token, and one verification row per draft token.
void EngineCore::build_batch(const SchedulerOutput& plan, Batch& batch) {
  batch.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& s = *c.seq;
    const int64_t last_committed = static_cast<int64_t>(s.tokens.size()) - 1;
    for (int64_t p = s.n_computed; p < s.n_computed + c.n_tokens; ++p) {
      batch.add(s.token_at(p), static_cast<int32_t>(p), s.seq_id(), p >= last_committed);
    }
  }
}

// Disaggregated prefill/decode: the plan's prompt chunks start in the prefill lane; the decodes
// stay in `plan`.
void EngineCore::launch_prompts(SchedulerOutput& plan, std::vector<RequestEvent>& out) {
  SchedulerOutput prompts;
  std::erase_if(plan.chunks, [&](const ScheduledChunk& c) {
    if (c.seq->decoding()) return false;
    prompts.chunks.push_back(c);
    prompts.n_tokens += c.n_tokens;
    plan.n_tokens -= c.n_tokens;
    return true;
  });
  if (!prompts.empty()) launch(prompts, out, true);
  if (!plan.empty() && prefill_) ++counters_.steps_beside_prefill;
}

// Starts the step of `plan` on the runner; its sequences are in flight until it lands.
void EngineCore::launch(const SchedulerOutput& plan, std::vector<RequestEvent>& out, bool prefill_lane) {
  Flight f;
  f.plan = plan;
  build_batch(plan, f.batch);
  for (const ScheduledChunk& c : plan.chunks) f.prefill_tokens += c.seq->in_prefill() ? c.n_tokens : 0;
  f.start = std::chrono::steady_clock::now();
  try {
    if (prefill_lane) {
      runner_.submit_prefill(f.batch, kv_);
    } else {
      runner_.submit(f.batch, kv_);
    }
  } catch (const RunnerFailure& e) {
    fail_everything(e.what(), out);
    return;
  } catch (const std::exception& e) {
    fail_chunks(plan, e.what(), out);
    return;
  }
  for (const ScheduledChunk& c : plan.chunks) c.seq->in_flight = true;
  if (prefill_lane) {
    prefill_ = std::move(f);
    return;
  }
  flights_.push_back(std::move(f));
  counters_.max_steps_in_flight = std::max(counters_.max_steps_in_flight, static_cast<int64_t>(flights_.size()));
}

// The model rejected the batch (a bug, not user input): end its requests, keep serving others.
void EngineCore::fail_chunks(const SchedulerOutput& plan, const std::string& what, std::vector<RequestEvent>& out) {
  for (const ScheduledChunk& c : plan.chunks) {
    c.seq->in_flight = false;
    RequestEvent ev;
    ev.id = c.seq->id;
    ev.finish = RequestFinish::Error;
    ev.error = std::string("forward pass failed: ") + what;
    emit(live_.at(c.seq->id), std::move(ev), out);
    finish(c.seq->id);
  }
}

// Collects the oldest step in flight (prefill_lane: the prefill lane's prompt step, waiting for it
// if need be) and commits what it computed: sampled tokens, verified drafts, finished requests.
void EngineCore::land(std::vector<RequestEvent>& out, bool prefill_lane) {
  Flight f = prefill_lane ? std::move(*prefill_) : std::move(flights_.front());
  if (prefill_lane) {
    prefill_.reset();
  } else {
    flights_.pop_front();
  }
  try {
    if (prefill_lane) {
      runner_.collect_prefill(logits_);
    } else {
      runner_.collect(logits_);
    }
  } catch (const RunnerFailure& e) {
    fail_everything(e.what(), out);
    return;
  } catch (const std::exception& e) {
    fail_chunks(f.plan, e.what(), out);
    return;
  }
  commit(f, out);
}

void EngineCore::commit(const Flight& f, std::vector<RequestEvent>& out) {
  for (const ScheduledChunk& c : f.plan.chunks) c.seq->in_flight = false;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - f.start).count();
  const auto n_batch = static_cast<int64_t>(f.batch.size());
  const int64_t decode_rows = n_batch - f.prefill_tokens;
  if (cost_.ready()) {  // judged by the fit before this step, so the step does not judge itself
    ++counters_.costed_steps;
    counters_.compute_bound_steps += cost_.compute_bound(decode_rows, f.prefill_tokens) ? 1 : 0;
  }
  cost_.observe(decode_rows, f.prefill_tokens, ms);
  if (f.prefill_tokens == 0) spec_policy_.observe_decode_step(decode_rows, ms);
  ++counters_.steps;
  counters_.prefill_steps += f.prefill_tokens > 0 ? 1 : 0;
  counters_.computed_tokens += n_batch;
  counters_.slot_steps_used += static_cast<int64_t>(f.plan.chunks.size());
  trace_step(f.plan, ms);

  const auto n_vocab = static_cast<size_t>(runner_.config().n_vocab);
  const std::vector<std::pair<SeqId, std::string>> failed = runner_.take_failed_sequences();
  size_t logit_row = 0;
  for (const ScheduledChunk& c : f.plan.chunks) {
    Sequence& s = *c.seq;
    const int64_t end = s.n_computed + c.n_tokens;
    const int64_t n_rows = std::max<int64_t>(0, end - (static_cast<int64_t>(s.tokens.size()) - 1));
    const auto fail = std::find_if(failed.begin(), failed.end(), [&](const auto& e) { return e.first == s.seq_id(); });
    if (fail != failed.end()) {  // its rows hold no logits: the request ends here
      logit_row += static_cast<size_t>(n_rows);
      RequestEvent ev;
      ev.id = s.id;
      ev.finish = RequestFinish::Error;
      ev.error = fail->second;
      emit(live_.at(s.id), std::move(ev), out);
      finish(s.id);
      continue;
    }
    if (n_rows == 0) {  // mid-prompt chunk
      s.n_computed = end;
      blocks_.commit(s.seq_id(), s.tokens, runner_.local_kv_length(s.seq_id(), s.n_computed));
      blocks_.release_out_of_window(s.seq_id(), s.n_computed);
      continue;
    }
    const auto rows = std::span<const float>(logits_).subspan(logit_row * n_vocab, static_cast<size_t>(n_rows) * n_vocab);
    const auto dim = static_cast<size_t>(runner_.config().dim);
    // A runner without the final hidden states (a pipeline) gives proposers an empty span.
    const std::span<const float> all_hidden = runner_.logits_hidden();
    const auto hidden = all_hidden.empty() ? all_hidden
                                           : all_hidden.subspan(logit_row * dim, static_cast<size_t>(n_rows) * dim);
    logit_row += static_cast<size_t>(n_rows);
    s.prompt_done = true;
    RequestEvent ev = advance_or_fail(s, rows, hidden);
    const bool done = ev.finish != RequestFinish::None;
    emit(live_.at(s.id), std::move(ev), out);
    if (done) finish(s.id);
  }
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

RequestEvent EngineCore::advance(Sequence& s, std::span<const float> logits, std::span<const float> hidden) {
  const int64_t n_vocab = runner_.config().n_vocab;
  const int64_t n_drafts = static_cast<int64_t>(logits.size()) / n_vocab - 1;  // the scheduler kept s.draft to this
  const int64_t committed = static_cast<int64_t>(s.tokens.size());
  RequestEvent ev;
  ev.id = s.id;
  Verdict v;
  if (!choose_tokens(s, logits, n_drafts, v, ev)) return ev;
  counters_.draft_tokens += n_drafts;
  counters_.accepted_tokens += v.n_accepted;
  ++counters_.decode_rows;
  if (n_drafts > 0) {
    spec_policy_.observe_verification(n_drafts, v.n_accepted);
    s.spec_backoff = v.n_accepted > 0 ? 0 : std::min(16, std::max(1, 2 * s.spec_backoff));
    s.spec_skip = s.spec_backoff;
    ++counters_.verifications;
    if (counters_.accepted_length.empty()) counters_.accepted_length.assign(kMaxSpecTokens + 1, 0);
    ++counters_.accepted_length[static_cast<size_t>(v.n_accepted)];
  }
  s.clear_draft();
  // The cache holds K/V for the committed tokens and every draft; keep the accepted ones.
  s.n_computed = committed + v.n_accepted;
  if (v.n_accepted < n_drafts) blocks_.rollback(s.seq_id(), n_drafts - v.n_accepted);
  for (SampleResult& r : v.tokens) {
    s.tokens.push_back(r.token);
    ++counters_.generated_tokens;
    ev.tokens.push_back({r.token, r.logprob, std::move(r.top)});
    if (s.grammar && !commit_grammar_token(s, r.token, grammar_end_tokens(s, end_of_generation_))) {
      ev.finish = RequestFinish::Error;  // the mask allowed it, so this is a bug, reported as one
      ev.error = "grammar: the sampled token " + std::to_string(r.token) + " does not fit the grammar";
      break;
    }
    TokenOutcome o = process_token(s, r.token, tokenizer_, runner_.config().context_length);
    ev.text += o.text;
    ev.finish = o.finish;
    if (ev.finish != RequestFinish::None) break;  // a stop inside an accepted run ends it there
  }
  s.n_computed = std::min<int64_t>(s.n_computed, static_cast<int64_t>(s.tokens.size()));
  blocks_.commit(s.seq_id(), s.tokens, runner_.local_kv_length(s.seq_id(), s.n_computed));
  blocks_.release_out_of_window(s.seq_id(), s.n_computed);
  if (ev.finish == RequestFinish::None && config_.recompute_kv) {
    blocks_.free(s.seq_id());
    s.n_computed = 0;
    s.prompt_done = false;
  }
  if (config_.proposer) {
    const auto dim = static_cast<size_t>(runner_.config().dim);
    config_.proposer->on_commit(s, hidden.empty() ? hidden : hidden.subspan(static_cast<size_t>(v.n_accepted) * dim, dim));
  }
  return ev;
}

RequestEvent EngineCore::advance_or_fail(Sequence& s, std::span<const float> logits, std::span<const float> hidden) {
  try {
    return advance(s, logits, hidden);
  } catch (const std::exception& e) {
    // The sequence may be half advanced; the caller finishes it (its blocks go back).
    RequestEvent ev;
    ev.id = s.id;
    ev.finish = RequestFinish::Error;
    ev.client_error = dynamic_cast<const GrammarError*>(&e) != nullptr;
    ev.error = e.what();
    return ev;
  }
}

bool EngineCore::choose_tokens(Sequence& s, std::span<const float> logits, int64_t n_drafts, Verdict& v,
                               RequestEvent& ev) {
  const int64_t n_vocab = runner_.config().n_vocab;
  std::span<const float> rows = logits;
  int64_t n_verify = n_drafts;
  try {
    if (s.grammar) {
      const auto t0 = std::chrono::steady_clock::now();
      masked_.resize(logits.size());
      const MaskedRows m = mask_grammar_rows(s, logits, masked_, n_vocab, grammar_end_tokens(s, end_of_generation_));
      counters_.grammar_rows += m.rows;
      counters_.grammar_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (m.first_empty) {
        // Complete (the vocabulary has no way on, or no end token may end it): stop; incomplete
        // with no token that continues it: the vocabulary cannot spell what the grammar needs.
        const bool complete = s.grammar->is_accepting();
        const TokenOutcome o = end_output(s, complete ? RequestFinish::Stop : RequestFinish::Error);
        ev.text = o.text;
        ev.finish = o.finish;
        if (!complete) ev.error = "grammar: no token of the vocabulary continues the text here";
        return false;
      }
      rows = std::span<const float>(masked_).first(static_cast<size_t>(m.rows * n_vocab));
      n_verify = m.rows - 1;
    }
    if (n_verify == 0) {
      v.tokens.push_back(s.sampler.sample(rows, s.tokens));
    } else {
      const auto k = static_cast<size_t>(n_verify);
      v = verify(s.sampler, s.tokens, std::span<const TokenId>(s.draft).first(k),
                 std::span<const TokenDistribution>(s.draft_q).first(k), s.draft_kind, rows, n_vocab);
    }
  } catch (const std::exception& e) {
    ev.finish = RequestFinish::Error;
    ev.client_error = dynamic_cast<const GrammarError*>(&e) != nullptr;
    ev.error = std::string(ev.client_error ? "" : "sampling failed: ") + e.what();
    return false;
  }
  return true;
}

// The step for watchers (StepTrace), before its sequences advance.
void EngineCore::trace_step(const SchedulerOutput& plan, double ms) {
  traced_.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    traced_.push_back({c.seq->id, c.seq->in_prefill(), static_cast<int32_t>(c.n_tokens), c.seq->n_computed});
  }
  trace_.record(traced_, ms);
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
  if (cost_.ready()) {
    st.step_cost_ms_per_prefill_token = cost_.ms_per_prefill_token();
    st.step_cost_ms_per_decode_row = cost_.ms_per_decode_row();
  }
  return st;
}

}  // namespace peregrine
