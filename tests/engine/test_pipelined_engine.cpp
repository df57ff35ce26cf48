// An engine whose runner keeps several steps in flight (a pipeline's micro-batches): no sequence
// is in two steps at once, cancellations and preemption wait for a sequence to land, and every
// request gets the tokens it gets alone. The runner here really computes each step (the whole
// model, in submit) and only returns the logits `depth - 1` steps later, the way a pipeline's last
// stage does.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <set>

#include "engine_test_util.h"

namespace peregrine {
namespace {

using test::Outcome;
using test::Recorder;
using test::stories;

class DeferredRunner final : public ModelRunner {
 public:
  DeferredRunner(Model& model, int depth) : model_(model), depth_(depth) {}
  const ModelConfig& config() const override { return model_.config(); }
  KvShape kv_shape() const override { return model_.kv_shape(); }
  std::unique_ptr<KvStorage> allocate_kv(const KvStorageSpec& spec) override {
    return model_.context().allocate_kv(spec);
  }
  void forward(const Batch& batch, KvCache& kv, std::vector<float>& logits) override { model_.forward(batch, kv, logits); }
  int max_in_flight() const override { return depth_; }
  void submit(const Batch& batch, KvCache& kv) override {
    for (SeqId s : batch.seq_ids) {
      EXPECT_EQ(std::count(busy_.begin(), busy_.end(), s), 0) << "sequence " << s << " is in two steps in flight";
    }
    pending_.emplace_back();
    model_.forward(batch, kv, pending_.back());
    busy_.insert(busy_.end(), batch.seq_ids.begin(), batch.seq_ids.end());
    sizes_.push_back(batch.size());
    max_pending_ = std::max(max_pending_, pending_.size());
  }
  StepResult collect() override {
    EXPECT_FALSE(pending_.empty());
    if (pending_.empty()) return {};
    landed_ = std::move(pending_.front());
    pending_.pop_front();
    busy_.erase(busy_.begin(), busy_.begin() + static_cast<std::ptrdiff_t>(sizes_.front()));
    sizes_.pop_front();
    return {landed_, {}, {}};
  }
  size_t max_pending() const { return max_pending_; }

 private:
  Model& model_;
  int depth_;
  std::deque<std::vector<float>> pending_;
  std::vector<float> landed_;  // the last collected step's logits
  std::deque<size_t> sizes_;
  std::vector<SeqId> busy_;     // the sequence ids of every row in flight, oldest step first
  size_t max_pending_ = 0;
};

TEST(PipelinedEngine, MicroBatchesInFlightGiveEachRequestItsTokens) {
  auto& s = stories();
  std::mt19937 rng(5);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Request> requests;
  for (int i = 0; i < 120; ++i) {
    Request r;
    r.prompt = {1};
    for (int k = 0, n = uni(0, 40); k < n; ++k) r.prompt.push_back(uni(3, 511));
    r.max_tokens = uni(1, 20);
    r.sampling.temperature = uni(0, 1) ? 0.f : 0.8f;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.priority = uni(0, 5) == 0 ? 1 : 0;
    requests.push_back(std::move(r));
  }
  for (int depth : {2, 3}) {
    DeferredRunner runner(s.model, depth);
    EngineConfig cfg;
    cfg.kv_blocks = 10;
    cfg.scheduler.max_batched_tokens = 48;
    cfg.scheduler.max_seqs = 6;
    EngineCore core(runner, nullptr, cfg);
    Recorder rec;
    const auto [ids, cancelled] = test::run_with_arrivals_and_cancels(core, rec, requests, uni, 3, 25, 1000000);
    ASSERT_EQ(ids.size(), requests.size());
    EXPECT_EQ(runner.max_pending(), static_cast<size_t>(depth)) << "the pipeline was never full";
    int checked = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Outcome& got = rec.outcomes[ids[i]];
      ASSERT_EQ(got.n_finish_events, 1) << "request " << i;
      const Outcome ref = test::run_alone(s.model, nullptr, requests[i], 10);
      if (cancelled.count(ids[i])) {
        ASSERT_LE(got.tokens.size(), ref.tokens.size());
        EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), ref.tokens.begin())) << "request " << i;
      } else {
        EXPECT_EQ(got.tokens, ref.tokens) << "depth " << depth << " request " << i;
        ++checked;
      }
    }
    EXPECT_GT(checked, 60);
    const EngineStats st = core.stats();
    EXPECT_GT(st.preemptions, 0);
    EXPECT_EQ(st.kv_blocks_used, 0);
    core.block_manager().clear_prefix_cache();
    EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
  }
}

}  // namespace
}  // namespace peregrine
