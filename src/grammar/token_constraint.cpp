#include "grammar/token_constraint.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "grammar/trie_walker.h"

namespace peregrine {
namespace {

// Past this many cached rank intervals (8 bytes each: 8 MiB) the cache of top frames starts over,
// so a huge grammar costs time, not unbounded memory.
constexpr size_t kMaxCachedIntervals = size_t{1} << 20;

void set_ranks(std::vector<uint64_t>& bits, std::span<const RankInterval> intervals) {
  for (const RankInterval& r : intervals) {
    uint32_t i = r.begin;
    for (; i < r.end && (i & 63) != 0; ++i) bits[i >> 6] |= uint64_t{1} << (i & 63);
    for (; i + 64 <= r.end; i += 64) bits[i >> 6] = ~uint64_t{0};
    for (; i < r.end; ++i) bits[i >> 6] |= uint64_t{1} << (i & 63);
  }
}

bool has_rank(const std::vector<uint64_t>& bits, uint32_t r) { return (bits[r >> 6] >> (r & 63)) & 1; }

}  // namespace

size_t TokenSet::count() const {
  size_t n = 0;
  for (uint64_t w : bits_) n += static_cast<size_t>(std::popcount(w));
  return n;
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie)
    : grammar_(std::move(grammar)),
      trie_(std::move(trie)),
      start_(grammar_),
      walker_(std::make_unique<TrieWalker>(*grammar_, *trie_)) {}

TokenConstraint::~TokenConstraint() = default;

namespace {

// Positions as bytes, a hash key.
void append_key(std::string& key, std::span<const uint32_t> positions) {
  const auto n = static_cast<uint32_t>(positions.size());
  key.append(reinterpret_cast<const char*>(&n), sizeof n);
  key.append(reinterpret_cast<const char*>(positions.data()), positions.size() * sizeof(uint32_t));
}

}  // namespace

const TopMasks& TokenConstraint::masks_for(const ParseStack& stack) {
  const size_t n = std::min(stack.size(), kTopFrames);
  const std::span<const uint32_t> top(stack.data() + stack.size() - n, n);
  std::string key;
  append_key(key, top);
  if (auto it = tops_.find(key); it != tops_.end()) return it->second;
  TopMasks tm;
  walker_->walk_top(top, tm.allowed, tm.uncertain);
  const size_t size = tm.allowed.size() + tm.uncertain.size();
  if (cached_intervals_ + size > kMaxCachedIntervals) {
    tops_.clear();
    cached_intervals_ = 0;
  }
  cached_intervals_ += size;
  return tops_.emplace(std::move(key), std::move(tm)).first->second;
}

size_t TokenConstraint::cached_tops() const {
  std::lock_guard lock(mu_);
  return tops_.size();
}

size_t TokenConstraint::cached_states() const {
  std::lock_guard lock(mu_);
  return states_.size();
}

// Per stack: the cached answer for its top frames, plus the uncertain tokens its whole-stack
// walk accepts.
void TokenConstraint::allowed_ranks(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits) {
  rank_bits.assign((trie_->n_ranked() + 63) / 64, 0);
  walker_->set_budget(kMaxMaskSteps);  // one budget for every walk of this mask
  std::vector<RankInterval> accepted;
  for (const ParseStack& s : m.stacks()) {
    if (s.empty()) continue;
    const TopMasks& tm = masks_for(s);
    set_ranks(rank_bits, tm.allowed);
    if (tm.uncertain.empty()) continue;
    accepted.clear();
    walker_->walk_stacks(std::span<const ParseStack>(&s, 1), tm.uncertain, accepted);
    set_ranks(rank_bits, accepted);
  }
}

// The allowed ranks of the matcher's state, from the state cache when it was seen before.
const std::vector<uint64_t>& TokenConstraint::state_ranks(const GrammarMatcher& m) {
  std::string key;
  for (const ParseStack& s : m.stacks()) append_key(key, s);
  if (auto it = states_.find(key); it != states_.end()) return it->second;
  if (states_.size() >= kStateCacheEntries) {
    states_.erase(state_order_.front());
    state_order_.erase(state_order_.begin());
  }
  std::vector<uint64_t> ranks;
  allowed_ranks(m, ranks);
  state_order_.push_back(key);
  return states_.emplace(std::move(key), std::move(ranks)).first->second;
}

// The first token of a SentencePiece text loses one leading space: its tokens that start with a
// space are judged on the rest of their bytes.
void TokenConstraint::fix_leading_space(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits) const {
  const RankInterval spaced = trie_->starting_with(' ');
  for (uint32_t r = spaced.begin; r < spaced.end; ++r) {
    rank_bits[r >> 6] &= ~(uint64_t{1} << (r & 63));
    const std::string& bytes = trie_->bytes(trie_->id_at(r));
    if (bytes.size() < 2) continue;
    GrammarMatcher probe = m;
    if (probe.accept_bytes(std::string_view(bytes).substr(1))) rank_bits[r >> 6] |= uint64_t{1} << (r & 63);
  }
}

void TokenConstraint::allowed(const GrammarMatcher& m, TokenSet& out, bool drop_leading_space) {
  std::lock_guard lock(mu_);
  rank_bits_ = state_ranks(m);
  if (drop_leading_space) fix_leading_space(m, rank_bits_);
  out = TokenSet(trie_->n_vocab());
  for (size_t w = 0; w < rank_bits_.size(); ++w) {
    for (uint64_t bits = rank_bits_[w]; bits != 0; bits &= bits - 1) {
      out.add(trie_->id_at(static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits)))));
    }
  }
}

size_t TokenConstraint::mask_logits(const GrammarMatcher& m, std::span<float> logits, bool drop_leading_space) {
  std::lock_guard lock(mu_);
  rank_bits_ = state_ranks(m);
  if (drop_leading_space) fix_leading_space(m, rank_bits_);
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  for (uint32_t r = 0; r < trie_->n_ranked(); ++r) {
    if (!has_rank(rank_bits_, r)) logits[static_cast<size_t>(trie_->id_at(r))] = kBanned;
  }
  for (int32_t id : trie_->empty_tokens()) logits[static_cast<size_t>(id)] = kBanned;
  size_t allowed = 0;
  for (uint64_t w : rank_bits_) allowed += static_cast<size_t>(std::popcount(w));
  return allowed;
}

bool TokenConstraint::accept_token(GrammarMatcher& m, int32_t id, bool drop_leading_space) const {
  if (id < 0 || id >= trie_->n_vocab()) return false;
  std::string_view bytes = trie_->bytes(id);
  if (drop_leading_space && !bytes.empty() && bytes.front() == ' ') bytes.remove_prefix(1);
  return !bytes.empty() && m.accept_bytes(bytes);
}

}  // namespace peregrine
