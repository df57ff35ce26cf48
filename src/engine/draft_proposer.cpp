#include "engine/draft_proposer.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

constexpr int32_t kDraftBlock = 16;

const MetaArray* vocabulary(const ModelFile& f) { return f.meta.get_array_opt("tokenizer.ggml.tokens"); }

}  // namespace

void check_same_vocabulary(const ModelFile& target, const ModelFile& draft) {
  const MetaArray* a = vocabulary(target);
  const MetaArray* b = vocabulary(draft);
  if (a == nullptr || b == nullptr) {
    throw UsageError("draft model " + draft.path + ": cannot compare vocabularies (" +
                     (a == nullptr ? target.path : draft.path) + " has no tokenizer.ggml.tokens)");
  }
  if (a->items.size() != b->items.size()) {
    throw UsageError("draft model " + draft.path + " has a vocabulary of " + std::to_string(b->items.size()) +
                     " tokens, the target " + target.path + " of " + std::to_string(a->items.size()));
  }
  for (size_t i = 0; i < a->items.size(); ++i) {
    if (a->items[i].as_string() != b->items[i].as_string()) {
      throw UsageError("draft model " + draft.path + ": token " + std::to_string(i) + " is '" +
                       b->items[i].as_string() + "', the target's is '" + a->items[i].as_string() + "'");
    }
  }
}

DraftModelProposer::DraftModelProposer(Model draft, int64_t kv_tokens)
    : draft_(std::move(draft)), kv_(draft_.kv_shape(), KvType::F16, std::max<int64_t>(1, (kv_tokens + kDraftBlock - 1) / kDraftBlock),
                         kDraftBlock) {}

void DraftModelProposer::resync(const Sequence& seq, State& st) {
  const auto common = static_cast<int64_t>(
      std::mismatch(st.cached.begin(), st.cached.end(), seq.tokens.begin(), seq.tokens.end()).first - st.cached.begin());
  // The last committed token is fed again to get the logits that propose the first draft token.
  const int64_t keep = std::min<int64_t>(common, static_cast<int64_t>(seq.tokens.size()) - 1);
  st.cached.resize(static_cast<size_t>(keep));
  kv_.truncate(seq.seq_id(), keep);
}

// The token the draft finds most likely under the request's filters (penalties, bias; top-k etc.
// cannot change the best one).
TokenId DraftModelProposer::most_likely(const Sequence& seq, std::span<const float> logits,
                                        std::span<const TokenId> history) {
  SamplingParams p = seq.request.sampling;
  p.temperature = 0;
  p.n_logprobs = 0;
  Sampler greedy(p);
  return greedy.sample(logits, history).token;
}

// One draft forward pass: feeds[i] are the tokens to append for active[i] (logits for the last of
// each). Returns the number of sequences that ran (those whose cache had room).
int64_t DraftModelProposer::step(const std::vector<Sequence*>& active, std::vector<std::vector<TokenId>>& feeds) {
  batch_.clear();
  for (size_t i = 0; i < active.size(); ++i) {
    State& st = states_[active[i]->seq_id()];
    const SeqId id = active[i]->seq_id();
    const auto base = static_cast<int64_t>(st.cached.size());
    const int64_t end = base + static_cast<int64_t>(feeds[i].size());
    if (end >= draft_.config().context_length || !kv_.reserve(id, end)) {
      feeds[i].clear();  // no room: this sequence gets no (more) proposals
      continue;
    }
    for (size_t j = 0; j < feeds[i].size(); ++j) {
      batch_.add(feeds[i][j], static_cast<int32_t>(base + static_cast<int64_t>(j)), id, j + 1 == feeds[i].size());
    }
  }
  if (batch_.size() == 0) return 0;
  draft_.forward(batch_, kv_, logits_);
  ++draft_passes_;
  return 1;
}

void DraftModelProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) {
  const auto n_vocab = static_cast<size_t>(draft_.config().n_vocab);
  std::vector<Sequence*> active;
  std::vector<std::vector<TokenId>> feeds;
  std::vector<int64_t> wanted;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    State& st = states_[s.seq_id()];
    resync(s, st);
    // Catch up on the committed tokens the draft has not seen (the whole prompt the first time).
    feeds.emplace_back(s.tokens.begin() + static_cast<int64_t>(st.cached.size()), s.tokens.end());
    active.push_back(&s);
    wanted.push_back(max_tokens[i]);
  }
  while (!active.empty()) {
    if (step(active, feeds) == 0) break;
    size_t row = 0;
    std::vector<Sequence*> next_active;
    std::vector<std::vector<TokenId>> next_feeds;
    std::vector<int64_t> next_wanted;
    for (size_t i = 0; i < active.size(); ++i) {
      if (feeds[i].empty()) continue;  // no room in the draft cache
      Sequence& s = *active[i];
      State& st = states_[s.seq_id()];
      st.cached.insert(st.cached.end(), feeds[i].begin(), feeds[i].end());
      std::vector<TokenId> history = s.tokens;
      history.insert(history.end(), s.draft.begin(), s.draft.end());
      const auto logits = std::span<const float>(logits_).subspan(row++ * n_vocab, n_vocab);
      const TokenId t = most_likely(s, logits, history);
      s.draft.push_back(t);
      s.draft_q.push_back(TokenDistribution::one_hot(t));
      if (static_cast<int64_t>(s.draft.size()) >= wanted[i]) continue;
      next_active.push_back(&s);
      next_feeds.push_back({t});
      next_wanted.push_back(wanted[i]);
    }
    active.swap(next_active);
    feeds.swap(next_feeds);
    wanted.swap(next_wanted);
  }
}

void DraftModelProposer::on_finish(const Sequence& seq) {
  kv_.release(seq.seq_id());
  states_.erase(seq.seq_id());
}

}  // namespace peregrine
