#include "grammar/token_constraint.h"

#include <bit>
#include <limits>

#include "grammar/trie_walker.h"

namespace peregrine {
namespace {

// Past this many cached rank intervals (8 bytes each) the per-position cache starts over, so a
// huge grammar costs time, not unbounded memory.
constexpr size_t kMaxCachedIntervals = size_t{8} << 20;

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
    : grammar_(std::move(grammar)), trie_(std::move(trie)), walker_(std::make_unique<TrieWalker>(*grammar_, *trie_)) {}

TokenConstraint::~TokenConstraint() = default;

const PositionMasks& TokenConstraint::masks_for(uint32_t pos) {
  if (auto it = cache_.find(pos); it != cache_.end()) return it->second;
  PositionMasks pm;
  walker_->walk_position(pos, pm.allowed, pm.uncertain);
  const size_t n = pm.allowed.size() + pm.uncertain.size();
  if (cached_intervals_ + n > kMaxCachedIntervals) {
    cache_.clear();
    cached_intervals_ = 0;
  }
  cached_intervals_ += n;
  return cache_.emplace(pos, std::move(pm)).first->second;
}

PositionMasks TokenConstraint::position_masks(uint32_t pos) {
  std::lock_guard lock(mu_);
  return masks_for(pos);
}

size_t TokenConstraint::cached_positions() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

// Per stack: the cached answer for its top, plus the uncertain tokens its full walk accepts.
void TokenConstraint::allowed_ranks(const GrammarMatcher& m, std::vector<uint64_t>& rank_bits) {
  rank_bits.assign((trie_->n_ranked() + 63) / 64, 0);
  std::vector<RankInterval> accepted;
  for (const ParseStack& s : m.stacks()) {
    if (s.empty()) continue;
    const PositionMasks& pm = masks_for(s.back());
    set_ranks(rank_bits, pm.allowed);
    if (pm.uncertain.empty()) continue;
    accepted.clear();
    walker_->walk_stacks(std::span<const ParseStack>(&s, 1), pm.uncertain, accepted);
    set_ranks(rank_bits, accepted);
  }
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
  allowed_ranks(m, rank_bits_);
  if (drop_leading_space) fix_leading_space(m, rank_bits_);
  out = TokenSet(trie_->n_vocab());
  for (size_t w = 0; w < rank_bits_.size(); ++w) {
    for (uint64_t bits = rank_bits_[w]; bits != 0; bits &= bits - 1) {
      out.add(trie_->id_at(static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits)))));
    }
  }
}

void TokenConstraint::mask_logits(const GrammarMatcher& m, std::span<float> logits, bool drop_leading_space) {
  std::lock_guard lock(mu_);
  allowed_ranks(m, rank_bits_);
  if (drop_leading_space) fix_leading_space(m, rank_bits_);
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  for (uint32_t r = 0; r < trie_->n_ranked(); ++r) {
    if (!has_rank(rank_bits_, r)) logits[static_cast<size_t>(trie_->id_at(r))] = kBanned;
  }
  for (int32_t id : trie_->empty_tokens()) logits[static_cast<size_t>(id)] = kBanned;
}

bool TokenConstraint::accept_token(GrammarMatcher& m, int32_t id, bool drop_leading_space) const {
  if (id < 0 || id >= trie_->n_vocab()) return false;
  std::string_view bytes = trie_->bytes(id);
  if (drop_leading_space && !bytes.empty() && bytes.front() == ' ') bytes.remove_prefix(1);
  return !bytes.empty() && m.accept_bytes(bytes);
}

}  // namespace peregrine
