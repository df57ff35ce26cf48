// How often a proposer's first draft token would be accepted at temperature > 0, under each rule,
// measured on the demo models along plain sampling's own text (which coupled speculation
// reproduces token for token). At every generated position of every (prompt, seed) run:
//   p  the target's distribution under the request's filters (Sampler::distribution), the token t
//      plain sampling draws from it and the uniform u it draws t with;
//   q  the proposer's distribution for that position under the same filters, as the engine's
//      proposers make it (DraftModelProposer, DraftHeadsProposer head 0, fed the same committed text).
// Columns (means over positions; "expected" ones are exact for the position, not sampled):
//   argmax      p(argmax q): the old proposals' acceptance
//   coupled     P(draw(p, key) == draw(q, key)): the Gumbel-max coupling peregrine samples with
//               (coupled_agreement), and "seen": whether draw(q, key) == t at the key actually drawn
//   id / rank   for comparison, the coupling of the inverse-CDF draws peregrine used before
//               (one uniform u, each distribution walked in token-id order / in its own
//               probability order): P(walk(p, u) == walk(q, u))
//   sum min     sum min(p, q): the written rule's acceptance for a proposal drawn independently
// Run: build/bench/spec_acceptance [-n 220] [--seeds 4] [--temperatures 0.5,0.8,1.0]
//      [--top-k 40] [--top-p 0.95] [--min-p 0.05]   (run's defaults; --top-k 0 --top-p 1 --min-p 0: off)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu_context.h"
#include "engine/draft_proposer.h"
#include "engine/draft_heads_proposer.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace peregrine;

namespace {

const char* const kPrompts[] = {"It is a truth universally", "Emma Woodhouse, handsome, clever, and rich,", "Mr. Darcy",
                                "\"My dear Mr. Bennet,\" said his lady to him one day,", "She was not"};

// The chance, over one uniform u in [0, 1), that the inverse-CDF walks of p and of q (each in
// token-id order, or each in its own probability order: weight descending, ties to the lower id)
// stop at the same id: the overlap of each id's interval of [0, 1) under the two walks.
double inverse_cdf_agreement(const TokenDistribution& p, const TokenDistribution& q, bool by_probability) {
  if (!(p.total > 0) || !(q.total > 0)) return 0.0;
  struct Interval {
    int32_t id;
    double lo, hi;
  };
  const auto intervals = [&](const TokenDistribution& d) {
    std::vector<size_t> order(d.ids.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (by_probability && d.weights[a] != d.weights[b]) return d.weights[a] > d.weights[b];
      return d.ids[a] < d.ids[b];
    });
    std::map<int32_t, Interval> out;
    double cumulative = 0.0;
    const double total = d.greedy ? 1.0 : d.total;
    for (size_t i : order) {
      const double w = d.greedy ? 1.0 : std::max(0.0, d.weights[i]);
      out[d.ids[i]] = {d.ids[i], cumulative / total, (cumulative + w) / total};
      cumulative += w;
    }
    return out;
  };
  const auto ps = intervals(p), qs = intervals(q);
  double agree = 0.0;
  for (const auto& [id, a] : ps) {
    const auto it = qs.find(id);
    if (it != qs.end()) agree += std::max(0.0, std::min(a.hi, it->second.hi) - std::max(a.lo, it->second.lo));
  }
  return agree;
}

int32_t most_likely(const TokenDistribution& q) {
  size_t best = 0;
  for (size_t i = 1; i < q.ids.size(); ++i) {
    if (q.weights[i] > q.weights[best] || (q.weights[i] == q.weights[best] && q.ids[i] < q.ids[best])) best = i;
  }
  return q.ids[best];
}

struct Tally {
  double n = 0, argmax = 0, coupled = 0, seen = 0, id_order = 0, rank_order = 0, shared = 0;
  void add(const TokenDistribution& p, const TokenDistribution& q, TokenId proposal, TokenId t) {
    n += 1;
    argmax += p.prob(most_likely(q));
    coupled += coupled_agreement(p, q);
    seen += proposal == t ? 1 : 0;
    id_order += inverse_cdf_agreement(p, q, false);
    rank_order += inverse_cdf_agreement(p, q, true);
    shared += shared_mass(p, q);
  }
  void print(const char* who, float temperature) const {
    std::printf("| %.1f | %s | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", temperature, who, n, argmax / n,
                coupled / n, seen / n, id_order / n, rank_order / n, shared / n);
  }
};

// The first proposal `proposer` makes for `seq` now (its distribution in *q); the draft is cleared.
TokenId first_proposal(Proposer& proposer, Sequence& seq, TokenDistribution* q) {
  seq.clear_draft();
  Sequence* seqs[] = {&seq};
  const int64_t one[] = {1};
  proposer.propose(seqs, one);
  if (seq.draft.empty()) return -1;
  *q = seq.draft_q.front();
  const TokenId x = seq.draft.front();
  seq.clear_draft();
  return x;
}

struct Options {
  int64_t n_tokens = 220;
  int seeds = 4;
  std::vector<float> temperatures = {0.5f, 0.8f, 1.0f};
  int32_t top_k = 40;
  float top_p = 0.95f, min_p = 0.05f;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "-n")
      o.n_tokens = std::atoll(value.c_str());
    else if (flag == "--seeds")
      o.seeds = std::atoi(value.c_str());
    else if (flag == "--top-k")
      o.top_k = std::atoi(value.c_str());
    else if (flag == "--top-p")
      o.top_p = std::strtof(value.c_str(), nullptr);
    else if (flag == "--min-p")
      o.min_p = std::strtof(value.c_str(), nullptr);
    else if (flag == "--temperatures") {
      o.temperatures.clear();
      std::stringstream ss(value);
      for (std::string t; std::getline(ss, t, ',');) o.temperatures.push_back(std::strtof(t.c_str(), nullptr));
    } else {
      std::fprintf(stderr, "spec_acceptance: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const std::filesystem::path models = std::filesystem::path(PEREGRINE_SOURCE_DIR) / "models";
  Model target(read_gguf(models / "demo-target.gguf"), shared_cpu_context());
  const Tokenizer tok = Tokenizer::from_metadata(target.file().meta, target.file().path);
  DraftModelProposer draft(Model(read_gguf(models / "demo-draft-distilled.gguf"), target.shared_context()), 4096);
  // Coupled, so q is each head's whole filtered distribution (the default proposes its argmax).
  DraftHeadsProposer heads(read_gguf(models / "demo-heads.gguf"), target, SampledProposals::Coupled);
  std::printf("top-k %d, top-p %.2f, min-p %.2f; %zu prompts x %d seeds x %lld tokens\n\n", o.top_k, o.top_p, o.min_p,
              std::size(kPrompts), o.seeds, static_cast<long long>(o.n_tokens));
  std::printf("| T | proposer | positions | argmax | coupled (Gumbel) | seen | inverse CDF, id order | rank order | sum min |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  RequestId next_id = 1;
  for (const float temperature : o.temperatures) {
    Tally draft_tally, heads_tally;
    for (const char* prompt : kPrompts) {
      for (int seed = 1; seed <= o.seeds; ++seed) {
        Request r;
        r.prompt = tok.encode(prompt, true, false);
        r.sampling.temperature = temperature;
        r.sampling.top_k = o.top_k;
        r.sampling.top_p = o.top_p;
        r.sampling.min_p = o.min_p;
        r.sampling.seed = static_cast<uint64_t>(seed);
        Sequence seq(next_id++, r, 0);
        KvCache kv =
            target.make_kv_cache(KvType::F16, 1 + (static_cast<int64_t>(r.prompt.size()) + o.n_tokens) / 16, 16);
        std::vector<float> logits, hidden;
        Batch b;
        for (size_t i = 0; i < seq.tokens.size(); ++i)
          b.add(seq.tokens[i], static_cast<int32_t>(i), 0, i + 1 == seq.tokens.size());
        for (int64_t step = 0; step < o.n_tokens; ++step) {
          TokenDistribution qd, qh;
          const TokenId xd = first_proposal(draft, seq, &qd);
          const TokenId xh = first_proposal(heads, seq, &qh);  // none before the first token
          if (!kv.pool().reserve(0, static_cast<int64_t>(seq.tokens.size()))) break;
          target.forward(b, kv, logits);
          const TokenDistribution p = seq.sampler.distribution(logits, seq.tokens);
          const TokenId t = seq.sampler.sample_from(p);
          if (xd >= 0) draft_tally.add(p, qd, xd, t);
          if (xh >= 0) heads_tally.add(p, qh, xh, t);
          seq.tokens.push_back(t);
          target.copy_logits_hidden(hidden);
          heads.on_commit(seq, hidden);
          b.clear();
          b.add(t, static_cast<int32_t>(seq.tokens.size() - 1), 0, true);
        }
        draft.on_finish(seq);
        heads.on_finish(seq);
      }
    }
    draft_tally.print("draft (distilled)", temperature);
    heads_tally.print("heads (head 0)", temperature);
  }
  return 0;
}
