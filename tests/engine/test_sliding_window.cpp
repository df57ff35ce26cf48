// Sliding-window attention in the engine: a Mistral-style model (every layer windowed) generates
// far past its window; the KV blocks a sequence holds stay bounded by the window (the blocks
// behind it go back to the pool), and the greedy tokens equal the scalar reference's
// (reference/, which attends to the window by plain loops over the whole sequence). Chunked
// prefill of a prompt longer than the window, prefix caching (a block the cache remembers is
// only let go by the sequence) and speculative decoding (rollback of rejected drafts) included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "backend/cpu_context.h"
#include "common/test_paths.h"
#include "engine/ngram_proposer.h"
#include "engine_test_util.h"
#include "reference/reference_forward.h"
#include "reference/tiny_specs.h"
#include "synth/synthetic.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;

constexpr int64_t kWindow = 8;
constexpr int32_t kBlockSize = 4;

SyntheticSpec windowed_spec(const std::string& arch) {
  SyntheticSpec s = test::tiny_spec("window-" + arch, arch, 64, 4, 2, 128, 300);
  s.context_length = 256;
  s.sliding_window = kWindow;
  return s;
}

struct WindowedModel {
  explicit WindowedModel(const SyntheticSpec& spec)
      : path(test::scratch_dir("engine_window_" + spec.arch + "_" + std::to_string(::getpid())) /
             (spec.name + ".gguf")) {
    write_synthetic_gguf(spec, TensorType::F32, 5, path);
    // Exact f32 activations and an f32 KV cache: greedy tokens comparable with the reference.
    model = std::make_unique<Model>(open_model_file(path), std::make_shared<CpuContext>(1, Activations::F32));
  }
  std::filesystem::path path;
  std::unique_ptr<Model> model;
};

Request greedy_request(int n_prompt, int64_t max_tokens) {
  Request r;
  for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(static_cast<TokenId>(1 + (37 * i + 11) % 290));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.f;
  r.ignore_eos = true;
  return r;
}

struct EngineRun {
  Outcome outcome;
  int64_t max_used_blocks = 0;
  int64_t draft_tokens = 0;  // speculation: drafts verified
};

EngineRun run_engine(Model& model, const Request& r, EngineConfig cfg) {
  cfg.kv_type = KvType::F32;
  cfg.block_size = kBlockSize;
  EngineCore core(model, nullptr, cfg);
  Recorder rec;
  const RequestId id = core.add_request(r);
  EngineRun run;
  while (core.has_work()) {
    for (const auto& ev : core.step()) rec(ev);
    run.max_used_blocks = std::max(run.max_used_blocks, core.block_manager().n_used_blocks());
  }
  run.outcome = rec.outcomes[id];
  run.draft_tokens = core.stats().draft_tokens;
  core.block_manager().clear_prefix_cache();
  EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks) << "every block back in the pool at the end";
  return run;
}

TEST(SlidingWindow, LongGenerationKeepsBlocksBoundedAndMatchesReference) {
  WindowedModel m(windowed_spec("llama"));
  ASSERT_EQ(m.model->config().kv_window(), kWindow);
  const ModelFile file = open_model_file(m.path);
  const Request r = greedy_request(20, 60);  // 80 positions, 10 times the window
  const std::vector<TokenId> want = reference_greedy(file, r.prompt, static_cast<int>(r.max_tokens));

  // Blocks a step can hold: those of the window before the token (positions p - W + 1 .. p - 1)
  // plus the chunk being written. Without the window, 80 positions need 20 blocks.
  const int64_t decode_bound = (kWindow - 1 + kBlockSize - 1) / kBlockSize + 1 + 1;
  for (bool caching : {false, true}) {
    EngineConfig cfg;
    cfg.kv_blocks = 40;
    cfg.prefix_caching = caching;
    cfg.scheduler.max_batched_tokens = 6;  // the 20-token prompt in 4 chunks, each past the window
    const EngineRun run = run_engine(*m.model, r, cfg);
    EXPECT_EQ(run.outcome.tokens, want) << "prefix caching " << caching;
    const int64_t prefill_bound = (kWindow - 1 + 6 + kBlockSize - 1) / kBlockSize + 1;
    EXPECT_LE(run.max_used_blocks, std::max(decode_bound, prefill_bound)) << "prefix caching " << caching;
  }
  // Speculative decoding on top (n-gram drafts, rejected ones rolled back): the same tokens.
  EngineConfig spec;
  spec.kv_blocks = 40;
  spec.proposer = std::make_shared<NgramProposer>();
  spec.spec_adaptive = false;
  const EngineRun speculated = run_engine(*m.model, r, spec);
  EXPECT_EQ(speculated.outcome.tokens, want);
  EXPECT_GT(speculated.draft_tokens, 0) << "no drafts were verified: the rollback path did not run";
}

// Interleaved layers (gemma2: every other one global) keep every block: nothing may be freed.
TEST(SlidingWindow, InterleavedGlobalLayersKeepEveryBlock) {
  SyntheticSpec spec = windowed_spec("gemma2");
  spec.tied_output = true;
  WindowedModel m(spec);
  ASSERT_EQ(m.model->config().kv_window(), 0);
  const ModelFile file = open_model_file(m.path);
  const Request r = greedy_request(10, 30);
  EngineConfig cfg;
  cfg.kv_blocks = 40;
  cfg.prefix_caching = false;
  const EngineRun run = run_engine(*m.model, r, cfg);
  EXPECT_EQ(run.outcome.tokens, reference_greedy(file, r.prompt, 30));
  EXPECT_EQ(run.max_used_blocks, (10 + 30 - 1 + kBlockSize - 1) / kBlockSize);
}

}  // namespace
}  // namespace peregrine
