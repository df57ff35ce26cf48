#pragma once
// A probability distribution over token ids: what a Sampler draws the next token from once its
// filters have run (sampler.h), and what speculative decoding compares between a proposer (q)
// and the target model (p). Kept sparse: filters usually leave a few candidates of a vocabulary
// of tens of thousands.
#include <cstdint>
#include <span>
#include <vector>

namespace peregrine {

struct TokenDistribution {
  std::vector<int32_t> ids;     // candidates, in the order a draw walks them (no duplicates;
                                // increasing id for a Sampler's)
  std::vector<double> weights;  // [ids.size()] unnormalized, >= 0
  double total = 0;             // sum of weights; > 0 for a usable distribution
  bool greedy = false;          // a single certain token (temperature 0): drawing takes no randomness

  // p(id) = weight / total; 0 for an id that is not listed.
  double prob(int32_t id) const;
  // The distribution certain to give `id` (what a deterministic proposer's q is).
  static TokenDistribution one_hot(int32_t id);
};

// Index into d.ids chosen by `unit` in [0, 1): the first id whose cumulative weight exceeds
// unit * total, walking d.ids in order (rounding that leaves the sum short picks the last id with
// non-zero weight). d.total must be > 0.
size_t pick(const TokenDistribution& d, double unit);

// The token d gives at `unit`: its only id when d.greedy (no randomness), else d.ids[pick(d, unit)].
// What Sampler::sample_from draws with the generator's next uniform, and what a coupled proposer
// computes with the same uniform ahead of time (engine/proposer.h).
int32_t draw(const TokenDistribution& d, double unit);

// normalize(max(0, p - q)): where the target's distribution exceeds the proposer's, the
// distribution speculative decoding samples from after rejecting a proposed token, so that the
// output follows p exactly. Ids in increasing order. total is 0 when p <= q everywhere (then
// p == q, and a rejection cannot happen).
TokenDistribution residual(const TokenDistribution& p, const TokenDistribution& q);

// Sum over ids of min(p, q) = 1 - total variation distance: the chance that the standard
// accept/reject rule accepts a proposal drawn from q independently of the target's draw.
double shared_mass(const TokenDistribution& p, const TokenDistribution& q);

// The chance, over one uniform u in [0, 1), that draw(p, u) == draw(q, u): the acceptance of a
// proposal drawn from q with the very uniform the target draws its token with (the coupled form).
// Each distribution is walked in its own ids order, so the figure depends on those orders; it is
// at most shared_mass(p, q), and equal to it when the two walks list ids in the same order and
// the cumulative sums before each id agree (as for the first id when both start with it).
double coupled_agreement(const TokenDistribution& p, const TokenDistribution& q);

}  // namespace peregrine
