// The commit half of EngineCore (engine_core.h): a landed step's logits become tokens, events and
// block commits, one sequence at a time.
#include <algorithm>
#include <chrono>
#include <string>

#include "engine/engine_core.h"
#include "engine/grammar_step.h"

namespace peregrine {

void EngineCore::commit(const Flight& f, const StepResult& r, std::vector<RequestEvent>& out) {
  for (const ScheduledChunk& c : f.work.chunks) c.seq->in_flight = false;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - f.start).count();
  const auto n_batch = static_cast<int64_t>(f.batch.size());
  // What the step carried, its chunks at the positions they started from (not yet advanced).
  StepShape shape, decodes;
  for (const ScheduledChunk& c : f.work.chunks) {
    const bool prefill = c.seq->phase == SeqPhase::Prefill;
    shape.add(prefill, c.seq->n_computed, c.n_tokens);
    if (!prefill) decodes.add(false, c.seq->n_computed, c.n_tokens);
  }
  const StepCostModel& cost = scheduler_.budget().cost();
  // Judged by the fit before this step, so the step does not judge itself.
  const double predicted_ms = cost.ready() ? cost.predict_ms(shape) : 0;
  const double budget_ms = scheduler_.budget().budget_ms(decodes);
  if (cost.ready()) {
    ++counters_.costed_steps;
    counters_.compute_bound_steps += cost.compute_bound(shape) ? 1 : 0;
  }
  scheduler_.observe_step(shape, ms);
  ++counters_.steps;
  counters_.prefill_steps += f.prefill_tokens > 0 ? 1 : 0;
  counters_.computed_tokens += n_batch;
  counters_.slot_steps_used += static_cast<int64_t>(f.work.chunks.size());
  trace_step(f.work, ms, predicted_ms, budget_ms);

  const auto n_vocab = static_cast<size_t>(runner_.config().n_vocab);
  const auto& failed = r.failed;
  // With a prefill lane only prompt steps' K/V is in this process's cache (decode steps write the
  // decode pool's): only they offer blocks to later prompts.
  const bool offers_prefix = runner_.prefill_lane() == nullptr || f.lane == Lane::Prefill;
  size_t logit_row = 0;
  for (const ScheduledChunk& c : f.work.chunks) {
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
      if (offers_prefix) blocks_.commit(s.seq_id(), s.tokens, s.n_computed);
      blocks_.release_out_of_window(s.seq_id(), s.n_computed);
      continue;
    }
    const auto rows = r.logits.subspan(logit_row * n_vocab, static_cast<size_t>(n_rows) * n_vocab);
    const auto dim = static_cast<size_t>(runner_.config().dim);
    // A runner without the final hidden states (a pipeline) gives proposers an empty span.
    const auto hidden = r.hidden.empty() ? r.hidden : r.hidden.subspan(logit_row * dim, static_cast<size_t>(n_rows) * dim);
    logit_row += static_cast<size_t>(n_rows);
    s.phase = SeqPhase::Decode;
    RequestEvent ev = advance_or_fail(s, rows, hidden, offers_prefix);
    const bool done = ev.finish != RequestFinish::None;
    emit(live_.at(s.id), std::move(ev), out);
    if (done) finish(s.id);
  }
}

RequestEvent EngineCore::advance(Sequence& s, std::span<const float> logits, std::span<const float> hidden,
                                 bool offers_prefix) {
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
    scheduler_.drafts().observe_verification(s, n_drafts, v.n_accepted);
    ++counters_.verifications;
    if (counters_.accepted_length.empty()) counters_.accepted_length.assign(kMaxSpecTokens + 1, 0);
    ++counters_.accepted_length[static_cast<size_t>(v.n_accepted)];
  }
  s.clear_draft();
  // The cache holds K/V for the committed tokens and every draft; keep the accepted ones.
  s.n_computed = committed + v.n_accepted;
  if (v.n_accepted < n_drafts) blocks_.rollback(s.seq_id(), committed + n_drafts, n_drafts - v.n_accepted);
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
  if (offers_prefix) blocks_.commit(s.seq_id(), s.tokens, s.n_computed);
  blocks_.release_out_of_window(s.seq_id(), s.n_computed);
  if (ev.finish == RequestFinish::None && config_.recompute_kv) {
    blocks_.free(s.seq_id());
    s.n_computed = 0;
    s.phase = SeqPhase::Prefill;
  }
  if (config_.proposer) {
    const auto dim = static_cast<size_t>(runner_.config().dim);
    config_.proposer->on_commit(s, hidden.empty() ? hidden : hidden.subspan(static_cast<size_t>(v.n_accepted) * dim, dim));
  }
  return ev;
}

RequestEvent EngineCore::advance_or_fail(Sequence& s, std::span<const float> logits, std::span<const float> hidden,
                                         bool offers_prefix) {
  try {
    return advance(s, logits, hidden, offers_prefix);
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
void EngineCore::trace_step(const SchedulerOutput& work, double ms, double predicted_ms, double budget_ms) {
  std::vector<TracedChunk> traced;
  traced.reserve(work.chunks.size());
  for (const ScheduledChunk& c : work.chunks) {
    traced.push_back(
        {c.seq->id, c.seq->phase == SeqPhase::Prefill, static_cast<int32_t>(c.n_tokens), c.seq->n_computed});
  }
  trace_.record(traced, ms, predicted_ms, budget_ms);
}

}  // namespace peregrine
