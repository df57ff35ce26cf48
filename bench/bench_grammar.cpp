// The cost of constrained decoding's token mask on a real vocabulary, without a model: N
// sequences walk a grammar at random (each step takes a token uniformly from the allowed ones, as
// a model knowing nothing would) and every step's masks for all N are timed, as the engine
// computes them (TokenConstraint::mask_logits on a full row of logits).
// Run: build/bench/bench_grammar VOCAB.gguf SCHEMA.json [SEQUENCES=16] [STEPS=64] [SEED=1]
// Prints the trie size, the first step (cold caches), and the per-step distribution after it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/grammar_step.h"
#include "format/model_file.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "tokenizer/tokenizer.h"

using namespace peregrine;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_grammar VOCAB.gguf SCHEMA.json [SEQUENCES=16] [STEPS=64] [SEED=1]\n");
    return 2;
  }
  const int n_seqs = argc > 3 ? std::atoi(argv[3]) : 16;
  const int n_steps = argc > 4 ? std::atoi(argv[4]) : 64;
  std::mt19937 rng(argc > 5 ? static_cast<uint32_t>(std::atoi(argv[5])) : 1u);
  try {
    const ModelFile file = open_model_file(argv[1]);
    const Tokenizer tok = Tokenizer::from_metadata(file.meta, file.path);
    std::ifstream in(argv[2]);
    std::stringstream text;
    text << in.rdbuf();
    auto t0 = Clock::now();
    const auto trie = make_vocab_trie(tok);
    const double trie_ms = ms_since(t0);
    t0 = Clock::now();
    auto grammar = std::make_shared<const Grammar>(compile_json_schema(nlohmann::ordered_json::parse(text.str())));
    const double compile_ms = ms_since(t0);
    TokenConstraint constraint(grammar, trie);
    std::printf("vocabulary %d tokens, trie %zu nodes (%.1f ms), schema compiled in %.2f ms\n", tok.n_vocab(),
                trie->nodes().size(), trie_ms, compile_ms);

    std::vector<GrammarMatcher> seqs(static_cast<size_t>(n_seqs), constraint.start());
    std::vector<bool> done(seqs.size(), false);
    std::vector<float> row(static_cast<size_t>(tok.n_vocab()));
    std::vector<double> step_ms;
    std::vector<int32_t> allowed;
    for (int step = 0; step < n_steps; ++step) {
      double ms = 0;
      int live = 0;
      for (size_t s = 0; s < seqs.size(); ++s) {
        if (done[s]) continue;
        ++live;
        std::fill(row.begin(), row.end(), 0.0f);
        t0 = Clock::now();
        constraint.mask_logits(seqs[s], row);
        ms += ms_since(t0);
        allowed.clear();
        for (int32_t id = 0; id < tok.n_vocab(); ++id) {
          if (row[static_cast<size_t>(id)] == 0.0f) allowed.push_back(id);
        }
        if (allowed.empty()) {
          done[s] = true;
          continue;
        }
        constraint.accept_token(seqs[s], allowed[rng() % allowed.size()]);
        done[s] = seqs[s].is_accepting() && !seqs[s].can_continue();
      }
      if (live == 0) break;
      step_ms.push_back(ms);
    }
    if (step_ms.empty()) return 0;
    std::printf("first step (cold caches), %d sequences: %.2f ms\n", n_seqs, step_ms.front());
    std::vector<double> rest(step_ms.begin() + 1, step_ms.end());
    std::sort(rest.begin(), rest.end());
    double sum = 0;
    for (double v : rest) sum += v;
    if (!rest.empty()) {
      auto q = [&](double p) { return rest[static_cast<size_t>(p * static_cast<double>(rest.size() - 1))]; };
      std::printf("next %zu steps, all sequences per step: mean %.2f ms, p50 %.2f, p90 %.2f, max %.2f\n", rest.size(),
                  sum / static_cast<double>(rest.size()), q(0.5), q(0.9), rest.back());
    }
    std::printf("cached: %zu top-of-stack answers, %zu states\n", constraint.cached_tops(), constraint.cached_states());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar: %s\n", e.what());
    return 1;
  }
  return 0;
}
