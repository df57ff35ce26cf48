#include "engine/draft_proposer.h"

#include <algorithm>
#include <string>

#include "engine/proposal_sampler.h"
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

DraftModelProposer::DraftModelProposer(Model draft, int64_t kv_tokens, SampledProposals mode)
    : draft_(std::move(draft)),
      mode_(mode),
      kv_(draft_.make_kv_cache(KvType::F16, std::max<int64_t>(1, (kv_tokens + kDraftBlock - 1) / kDraftBlock),
                               kDraftBlock)) {}

void DraftModelProposer::resync(const Sequence& seq, State& st) {
  const auto common = static_cast<int64_t>(
      std::mismatch(st.cached.begin(), st.cached.end(), seq.tokens.begin(), seq.tokens.end()).first - st.cached.begin());
  // The last committed token is fed again to get the logits that propose the first draft token.
  const int64_t keep = std::min<int64_t>(common, static_cast<int64_t>(seq.tokens.size()) - 1);
  st.cached.resize(static_cast<size_t>(keep));
  kv_.pool().truncate(seq.seq_id(), keep);
}

// A sequence still being proposed for: the tokens the next draft pass appends for it (logits
// for the last), and how its proposals are chosen.
struct DraftModelProposer::Pending {
  Sequence* seq;
  std::vector<TokenId> feed;
  ProposalSampler sampler;
  int64_t wanted;
};

// One draft forward pass over every pending sequence's feed. A sequence whose cache has no room
// gets its feed cleared (no more proposals). Returns false when nothing ran.
bool DraftModelProposer::step(std::vector<Pending>& pending) {
  batch_.clear();
  for (Pending& p : pending) {
    const SeqId id = p.seq->seq_id();
    const auto base = static_cast<int64_t>(states_[id].cached.size());
    const int64_t end = base + static_cast<int64_t>(p.feed.size());
    if (end >= draft_.config().context_length || !kv_.pool().reserve(id, end)) {
      p.feed.clear();
      continue;
    }
    for (size_t j = 0; j < p.feed.size(); ++j) {
      batch_.add(p.feed[j], static_cast<int32_t>(base + static_cast<int64_t>(j)), id, j + 1 == p.feed.size());
    }
  }
  if (batch_.size() == 0) return false;
  draft_.forward(batch_, kv_, logits_);
  ++draft_passes_;
  return true;
}

void DraftModelProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) {
  const auto n_vocab = static_cast<size_t>(draft_.config().n_vocab);
  std::vector<Pending> pending;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    State& st = states_[s.seq_id()];
    resync(s, st);
    // Catch up on the committed tokens the draft has not seen (the whole prompt the first time).
    pending.push_back({&s,
                       {s.tokens.begin() + static_cast<int64_t>(st.cached.size()), s.tokens.end()},
                       ProposalSampler(s, mode_),
                       max_tokens[i]});
  }
  while (!pending.empty() && step(pending)) {
    size_t row = 0;
    std::vector<Pending> next;
    for (Pending& p : pending) {
      if (p.feed.empty()) continue;  // no room in the draft cache
      State& st = states_[p.seq->seq_id()];
      st.cached.insert(st.cached.end(), p.feed.begin(), p.feed.end());
      const TokenId t = p.sampler.next(std::span<const float>(logits_).subspan(row++ * n_vocab, n_vocab));
      if (static_cast<int64_t>(p.seq->draft.size()) >= p.wanted) continue;
      p.feed = {t};  // fed in the next pass
      next.push_back(std::move(p));
    }
    pending.swap(next);
  }
}

void DraftModelProposer::on_finish(const Sequence& seq) {
  kv_.pool().release(seq.seq_id());
  states_.erase(seq.seq_id());
}

}  // namespace peregrine
