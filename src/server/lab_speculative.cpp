// Figure 10.6: speculative decoding on the lab's engine. The same greedy request runs plainly and
// with a proposer; a wrapper records what the proposer drafted each pass, so every verification
// pass is shown as its drafts, the accepted prefix, the rejected draft and the token the target
// gave instead (or the bonus token after a fully accepted draft).
#include <algorithm>
#include <map>

#include "engine/proposer_registry.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/lab_run.h"
#include "util/error.h"

namespace peregrine::server::lab {
namespace {

using nlohmann::json;

// The proposer the engine runs, unchanged, with each pass's drafts kept for the figure.
class RecordingProposer final : public Proposer {
 public:
  explicit RecordingProposer(std::shared_ptr<Proposer> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  void propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) override {
    inner_->propose(seqs, max_tokens);
    for (Sequence* s : seqs) drafts_[s->id] = s->draft;
  }
  void on_commit(const Sequence& seq, std::span<const float> target_hidden) override {
    inner_->on_commit(seq, target_hidden);
  }
  void on_finish(const Sequence& seq) override { inner_->on_finish(seq); }
  int64_t passes() const override { return inner_->passes(); }
  // The drafts proposed for `id` since the last call (empty if none).
  std::vector<TokenId> take(RequestId id) {
    auto it = drafts_.find(id);
    if (it == drafts_.end()) return {};
    std::vector<TokenId> d = std::move(it->second);
    drafts_.erase(it);
    return d;
  }

 private:
  std::shared_ptr<Proposer> inner_;
  std::map<RequestId, std::vector<TokenId>> drafts_;
};

struct Spec {
  std::string proposer;
  int64_t k = 4, tokens = 48;
  std::vector<TokenId> prompt;
};

json pieces(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  json out = json::array();
  for (TokenId t : ids) out.push_back(tok.decode(std::vector<TokenId>{t}));
  return out;
}

json spec_run(const Context& c, const Spec& s) {
  Model& model = local_model(c.model);
  Engine& serving = c.model.engine();
  const Tokenizer& tok = c.model.tokenizer();
  const int64_t positions = static_cast<int64_t>(s.prompt.size()) + s.tokens + s.k + 1;

  // Plain decoding first, then the same request with the proposer, in the same minute.
  EngineCore plain_core(model, nullptr, lab_config(serving, positions, 1));
  const RequestId plain_id = plain_core.add_request(lab_request(s.prompt, s.tokens));
  const LabRun plain = run_interleaved(serving, plain_core, c.stopping, Lab::kRunSeconds / 2);
  std::vector<TokenId> plain_tokens;
  double plain_ms = 0;
  for (const LabStep& st : plain.steps) {
    plain_ms += st.ms;
    for (const RequestEvent& ev : st.events)
      if (ev.id == plain_id)
        for (const GeneratedToken& g : ev.tokens) plain_tokens.push_back(g.token);
  }

  std::shared_ptr<Proposer> inner;
  try {
    inner = c.options.make_proposer ? c.options.make_proposer(s.proposer, model, positions)
                                    : find_proposer(s.proposer)->make({model, std::nullopt, positions});
  } catch (const std::runtime_error& e) {  // UsageError, FormatError: no file for it
    throw invalid_request("'proposer' " + s.proposer + ": " + e.what(), "proposer");
  }
  auto recording = std::make_shared<RecordingProposer>(inner);
  EngineConfig config = lab_config(serving, positions, 1);
  config.proposer = recording;
  config.spec_tokens = s.k;
  config.spec_adaptive = false;
  EngineCore spec_core(model, nullptr, config);
  const RequestId id = spec_core.add_request(lab_request(s.prompt, s.tokens));
  const LabRun spec = run_interleaved(serving, spec_core, c.stopping, Lab::kRunSeconds / 2,
                                      [&](LabStep& step) { step.drafts = recording->take(id); });

  json passes = json::array();
  std::vector<TokenId> spec_tokens;
  std::vector<int64_t> proposed_at(static_cast<size_t>(s.k), 0), accepted_at(static_cast<size_t>(s.k), 0);
  double spec_ms = 0;
  for (const LabStep& st : spec.steps) {
    spec_ms += st.ms;
    const std::vector<TokenId>& drafts = st.drafts;
    std::vector<TokenId> emitted;
    for (const RequestEvent& ev : st.events)
      if (ev.id == id)
        for (const GeneratedToken& g : ev.tokens) emitted.push_back(g.token);
    if (emitted.empty()) continue;
    spec_tokens.insert(spec_tokens.end(), emitted.begin(), emitted.end());
    size_t accepted = 0;
    while (accepted < drafts.size() && accepted + 1 < emitted.size() && drafts[accepted] == emitted[accepted])
      ++accepted;
    for (size_t j = 0; j < drafts.size() && j < proposed_at.size(); ++j) {
      ++proposed_at[j];
      if (j < accepted) ++accepted_at[j];
    }
    const bool all = accepted == drafts.size();
    json pass = {{"proposed", drafts}, {"proposed_text", pieces(tok, drafts)}, {"accepted", accepted},
                 {"emitted", emitted}, {"emitted_text", pieces(tok, emitted)}, {"ms", st.ms}};
    pass["rejected"] = all ? json(nullptr) : json(drafts[accepted]);
    pass["target_token"] = emitted.size() > accepted ? json(emitted[accepted]) : json(nullptr);
    pass["bonus"] = all && !drafts.empty() && emitted.size() > accepted;
    passes.push_back(pass);
  }
  json acceptance = json::array();
  for (size_t j = 0; j < proposed_at.size(); ++j) {
    acceptance.push_back({{"position", j + 1},
                          {"proposed", proposed_at[j]},
                          {"accepted", accepted_at[j]},
                          {"rate", proposed_at[j] ? static_cast<double>(accepted_at[j]) / proposed_at[j] : 0.0}});
  }
  const auto rate = [](size_t n, double ms) { return ms > 0 ? static_cast<double>(n) / (ms / 1e3) : 0.0; };
  return {{"proposer", s.proposer},
          {"k", s.k},
          {"tokens", s.tokens},
          {"passes", passes},
          {"acceptance", acceptance},
          {"tokens_per_pass", passes.empty() ? 0.0 : static_cast<double>(spec_tokens.size()) / passes.size()},
          {"plain",
           {{"ms", plain_ms}, {"tokens_per_s", rate(plain_tokens.size(), plain_ms)}, {"steps", plain.steps.size()}}},
          {"speculative",
           {{"ms", spec_ms}, {"tokens_per_s", rate(spec_tokens.size(), spec_ms)}, {"steps", spec.steps.size()}}},
          {"speedup", spec_ms > 0 ? plain_ms / spec_ms : 0.0},
          {"identical", plain_tokens == spec_tokens && static_cast<int64_t>(plain_tokens.size()) == s.tokens},
          {"text", tok.decode(spec_tokens)},
          {"plain_text", tok.decode(plain_tokens)},
          {"under_load", plain.under_load || spec.under_load},
          {"truncated", plain.truncated || spec.truncated}};
}

}  // namespace

LabJob speculative(const Context& c, const nlohmann::json& body) {
  local_model(c.model);
  Spec s;
  const std::vector<std::string>& offered = c.options.proposers;
  s.proposer = read_string(body, "proposer").value_or(offered.empty() ? "ngram" : offered.front());
  if (std::find(offered.begin(), offered.end(), s.proposer) == offered.end() || find_proposer(s.proposer) == nullptr) {
    std::string names;
    for (const std::string& n : offered) names += (names.empty() ? "" : ", ") + n;
    throw invalid_request("'proposer': one of " + names, "proposer");
  }
  s.k = int_field(body, "k", 1, 8, 4);
  s.prompt = prompt_field(c.model, body, 64);
  const int64_t room =
      std::min<int64_t>(256, c.model.context_length()) - static_cast<int64_t>(s.prompt.size()) - s.k - 1;
  if (room < 1) throw invalid_request("'prompt' leaves no room to generate", "prompt");
  s.tokens = int_field(body, "tokens", 1, std::min<int64_t>(128, room), std::min<int64_t>(48, room));
  return [c, s] { return spec_run(c, s); };
}

}  // namespace peregrine::server::lab
