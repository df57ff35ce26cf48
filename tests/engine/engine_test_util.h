#pragma once
// Shared by the engine tests: stories260K (a real trained model, 5 layers, vocab 512, context
// 512) with its tokenizer, and a runner that drives an EngineCore to completion.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "backend/cpu_context.h"
#include "common/test_context.h"
#include "common/test_paths.h"
#include "engine/engine_core.h"
#include "engine/proposer.h"
#include "format/llama2c.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::test {

struct Stories {
  Stories()
      : file(read_llama2c(shared_file("models/stories260K/stories260K.bin"),
                          shared_file("models/stories260K/tok512.bin"))),
        tokenizer(Tokenizer::from_metadata(file.meta, file.path)),
        model(file, shared_test_context()) {}
  ModelFile file;
  Tokenizer tokenizer;
  Model model;
};

// One loaded copy per test binary (loading is cheap, but keep the tests fast).
inline Stories& stories() {
  static Stories s;
  return s;
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::string text;
  RequestFinish finish = RequestFinish::None;
  int n_finish_events = 0;
  std::string error;
};

// Records every request's events.
struct Recorder {
  std::map<RequestId, Outcome> outcomes;
  void operator()(const RequestEvent& ev) {
    Outcome& o = outcomes[ev.id];
    for (const GeneratedToken& t : ev.tokens) o.tokens.push_back(t.token);
    o.text += ev.text;
    if (ev.finish != RequestFinish::None) {
      o.finish = ev.finish;
      o.error = ev.error;
      ++o.n_finish_events;
    }
  }
};

inline void run_to_completion(EngineCore& core, Recorder& rec, int max_steps = 1000000) {
  for (int i = 0; i < max_steps && core.has_work(); ++i) {
    for (const auto& ev : core.step()) rec(ev);
  }
}

// The stress tests' driver: before each step, 0..max_per_step of `requests` arrive (in order);
// now and then (one step in cancel_one_in + 1) a random already-submitted request is cancelled;
// stepping goes on until every request has ended. ids[i] is requests[i]'s id; `uni(lo, hi)` is
// the test's seeded uniform integer source, so a test replays the same scenario every run.
struct StressRun {
  std::vector<RequestId> ids;
  std::set<RequestId> cancelled;
};
inline StressRun run_with_arrivals_and_cancels(EngineCore& core, Recorder& rec, const std::vector<Request>& requests,
                                               const std::function<int(int, int)>& uni, int max_per_step,
                                               int cancel_one_in, int max_steps) {
  StressRun run;
  size_t next = 0;
  for (int step = 0; step < max_steps && (next < requests.size() || core.has_work()); ++step) {
    for (int k = uni(0, max_per_step); k > 0 && next < requests.size(); --k) {
      run.ids.push_back(core.add_request(requests[next++]));
    }
    if (!run.ids.empty() && uni(0, cancel_one_in) == 0) {
      const RequestId victim = run.ids[static_cast<size_t>(uni(0, static_cast<int>(run.ids.size()) - 1))];
      if (core.cancel(victim)) run.cancelled.insert(victim);
    }
    for (const auto& ev : core.step()) rec(ev);
  }
  return run;
}

// Proposes the continuation of whichever known token sequence extends the sequence's committed
// tokens, replacing every `wrong_every`-th proposed position (by absolute position) with another
// token; sequences it knows nothing about get no proposal.
class ReplayProposer : public Proposer {
 public:
  explicit ReplayProposer(int wrong_every) : wrong_every_(wrong_every) {}
  std::vector<std::vector<TokenId>> known;
  int64_t calls = 0;

  std::string_view name() const override { return "replay"; }
  void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) override {
    ++calls;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = *seqs[i];
      for (const auto& full : known) {
        if (full.size() <= s.tokens.size() || !std::equal(s.tokens.begin(), s.tokens.end(), full.begin())) continue;
        for (size_t p = s.tokens.size(); p < full.size() && static_cast<int64_t>(s.draft.size()) < max_tokens[i]; ++p) {
          const TokenId t =
              wrong_every_ > 0 && p % static_cast<size_t>(wrong_every_) == 0 ? (full[p] + 7) % 512 : full[p];
          s.draft.push_back(t);
          s.draft_q.push_back(TokenDistribution::one_hot(t));
        }
        break;
      }
    }
  }

 private:
  int wrong_every_;
};

// A request run alone on a fresh engine without prefix caching: the reference output.
inline Outcome run_alone(Model& model, const Tokenizer* tok, const Request& r, int64_t kv_blocks = 40,
                         KvType kv_type = KvType::F16) {
  EngineConfig cfg;
  cfg.kv_blocks = kv_blocks;
  cfg.kv_type = kv_type;
  cfg.prefix_caching = false;
  EngineCore core(model, tok, cfg);
  Recorder rec;
  const RequestId id = core.add_request(r);
  run_to_completion(core, rec);
  return rec.outcomes[id];
}

}  // namespace peregrine::test
