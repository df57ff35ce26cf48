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
  std::vector<int32_t> ids;     // candidates, no duplicates (increasing id for a Sampler's)
  std::vector<double> weights;  // [ids.size()] unnormalized, >= 0
  double total = 0;             // sum of weights; > 0 for a usable distribution
  bool greedy = false;          // a single certain token (temperature 0): drawing takes no randomness

  // p(id) = weight / total; 0 for an id that is not listed.
  double prob(int32_t id) const;
  // The distribution certain to give `id` (what a deterministic proposer's q is).
  static TokenDistribution one_hot(int32_t id);
};

// Which draw of which request: the noise of a token draw is a function of these and the token
// id alone (sampling/rng.h), so a proposer that knows the step a position will be drawn at
// computes the very noise the target's draw will use there.
struct DrawKey {
  uint64_t seed = 0;
  uint64_t step = 0;  // the sampler's draw count: its n-th token draw has step n
};

// The token d gives under the noise of `key`, by the Gumbel-max trick: each listed id with
// weight w > 0 gets a Gumbel variate g(key, id), and the draw is the id maximizing log w + g, an
// exact sample of normalize(weights). Computed as the equivalent exponential race, the least
// E / w with E = -log(open_unit(bits)), E ~ Exp(1) (g = -log E); ties (probability ~0) go to
// the lower id. Ids of weight 0 are never drawn; the order of d.ids does not matter. A greedy d
// gives its only id (no noise). d.total must be > 0.
int32_t draw(const TokenDistribution& d, const DrawKey& key);

// normalize(max(0, p - q)): where the target's distribution exceeds the proposer's, the
// distribution speculative decoding samples from after rejecting a proposed token, so that the
// output follows p exactly. Ids in increasing order. total is 0 when p <= q everywhere (then
// p == q, and a rejection cannot happen).
TokenDistribution residual(const TokenDistribution& p, const TokenDistribution& q);

// Sum over ids of min(p, q) = 1 - total variation distance: the chance that the standard
// accept/reject rule accepts a proposal drawn from q independently of the target's draw.
double shared_mass(const TokenDistribution& p, const TokenDistribution& q);

// The chance, over the noise, that draw(p, key) == draw(q, key): the acceptance of a proposal
// drawn from q with the noise the target draws its token with (the coupled form). For the
// exponential race it is exact in closed form,
//   sum_x 1 / sum_y max(p_y / p_x, q_y / q_x)
// (x wins both races when every other E_y exceeds E_x times both ratios), computed in
// O(n log n). At most sum min(p, q), 1 when p == q, p(x) for a one-hot q at x.
double coupled_agreement(const TokenDistribution& p, const TokenDistribution& q);

}  // namespace peregrine
