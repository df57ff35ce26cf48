// Partial models (model_slice.h): pipeline stages run back to back give the whole model's logits
// bit for bit; tensor-parallel ranks, run together with an all-reduce, give the whole model's
// logits up to the order of one sum (and agree with each other exactly); a slice that cannot be
// cut is refused with the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include "backend/cpu_context.h"
#include "common/test_context.h"
#include "common/test_paths.h"
#include "model/model.h"
#include "synth/synthetic.h"
#include "util/error.h"

namespace peregrine {
namespace {

ModelFile synth_model(const std::string& preset, TensorType type) {
  // Per process: ctest runs the tests of this file in parallel processes.
  const auto dir = test::scratch_dir("model_partial_" + std::to_string(::getpid()));
  const auto path = dir / (preset + "-" + std::string(tensor_type_name(type)) + ".gguf");
  const auto spec = synthetic_preset(preset);
  if (!spec) throw std::runtime_error("no preset " + preset);
  write_synthetic_gguf(*spec, type, 5, path);
  return open_model_file(path);
}

// A prompt chunk of sequence 0 mixed with sequence 1's, every row asking for logits.
Batch prompt_batch(int64_t n_vocab) {
  Batch b;
  for (int i = 0; i < 7; ++i) b.add(static_cast<TokenId>((31 * i + 3) % n_vocab), i, 0, true);
  for (int i = 0; i < 4; ++i) b.add(static_cast<TokenId>((17 * i + 9) % n_vocab), i, 1, true);
  return b;
}

Batch decode_batch() {
  Batch b;
  b.add(42, 7, 0, true);
  b.add(43, 4, 1, true);
  return b;
}

void reserve(KvCache& kv) {
  ASSERT_TRUE(kv.pool().reserve(0, 16));
  ASSERT_TRUE(kv.pool().reserve(1, 16));
}

TEST(PartialModel, TwoLayerRangesBackToBackGiveTheWholeModelsLogits) {
  for (const std::string preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-phi3"}) {
    for (TensorType type : {TensorType::Q8_0, TensorType::F16}) {
      const ModelFile file = synth_model(preset, type);
      const auto ctx = test::make_test_context(2);
      Model whole(file, ctx), first(file, ctx, {0, 1}), second(file, ctx, {1, -1});
      EXPECT_EQ(first.kv_shape().n_layers, 1);
      EXPECT_EQ(second.kv_shape().n_layers, whole.config().n_layers - 1);
      KvCache kv_whole = whole.make_kv_cache(KvType::F16, 8, 4), kv_first = first.make_kv_cache(KvType::F16, 8, 4),
              kv_second = second.make_kv_cache(KvType::F16, 8, 4);
      reserve(kv_whole);
      reserve(kv_first);
      reserve(kv_second);
      for (const Batch& b : {prompt_batch(whole.config().n_vocab), decode_batch()}) {
        std::vector<float> want, got, hidden;
        whole.forward(b, kv_whole, want);
        first.forward_layers(b, kv_first);
        first.copy_hidden(hidden);
        second.forward_layers(b, kv_second, hidden);
        second.compute_logits(b, got);
        ASSERT_EQ(want.size(), got.size());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()))
            << preset << " " << tensor_type_name(type);
      }
      std::vector<float> out;
      EXPECT_THROW(first.compute_logits(decode_batch(), out), UsageError);
      EXPECT_THROW(first.forward_layers(decode_batch(), kv_first, std::vector<float>(2 * whole.config().dim)),
                   UsageError);
      EXPECT_THROW(second.forward_layers(decode_batch(), kv_second, std::vector<float>(3)), UsageError);
      EXPECT_THROW(second.forward(decode_batch(), kv_second, out), UsageError);
    }
  }
}

// Two tensor-parallel ranks in two threads, each with its own context; the all-reduce adds rank
// 0's partial sum and rank 1's in that order on both, so both hold the same bits.
struct TwoRanks {
  std::barrier<> sync{2};
  std::vector<float>* partial[2] = {nullptr, nullptr};
  std::vector<float> copies[2];

  Model::AllReduce reducer(int rank) {
    return [this, rank](std::span<float> x) {
      copies[rank].assign(x.begin(), x.end());
      sync.arrive_and_wait();
      for (size_t i = 0; i < x.size(); ++i) x[i] = copies[0][i] + copies[1][i];
      sync.arrive_and_wait();  // nobody overwrites its copy before the other has read it
    };
  }
};

TEST(PartialModel, TensorParallelRanksMatchTheWholeModelUpToTheOrderOfOneSum) {
  // GQA groups split; MQA replicated; qwen3's per-head norms; phi3's fused q|k|v and gate|up
  // matrices, each rank taking its heads' rows of q, k and v and its rows of gate and of up.
  for (const std::string preset : {"tiny-llama", "tiny-llama3", "tiny-qwen3", "tiny-phi3"}) {
    const ModelFile file = synth_model(preset, TensorType::Q8_0);
    // Exact f32 activations: 8-bit ones would re-round each slightly different partial sum.
    Model whole(file, test::make_test_context(1, Activations::F32));
    KvCache kv_whole = whole.make_kv_cache(KvType::F32, 8, 4);
    reserve(kv_whole);
    std::vector<float> want;
    whole.forward(prompt_batch(whole.config().n_vocab), kv_whole, want);

    TwoRanks group;
    std::vector<float> logits[2], hidden[2];
    int64_t vocab_begin[2] = {0, 0};
    auto rank_main = [&](int rank) {
      Model m(file, test::make_test_context(1, Activations::F32), {0, -1, rank, 2});
      m.set_all_reduce(group.reducer(rank));
      EXPECT_EQ(m.shape().n_heads(), whole.config().n_heads / 2);
      KvCache kv = m.make_kv_cache(KvType::F32, 8, 4);
      reserve(kv);
      const Batch b = prompt_batch(whole.config().n_vocab);
      m.forward_layers(b, kv);
      m.copy_hidden(hidden[rank]);
      m.compute_logits(b, logits[rank]);
      vocab_begin[rank] = m.shape().vocab_begin;
    };
    std::thread r1(rank_main, 1);
    rank_main(0);
    r1.join();
    ASSERT_EQ(0, std::memcmp(hidden[0].data(), hidden[1].data(), sizeof(float) * hidden[0].size()));
    const int64_t nv = whole.config().n_vocab, v1 = vocab_begin[1], rows = static_cast<int64_t>(want.size()) / nv;
    double worst = 0, scale = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v = 0; v < nv; ++v) {
        const float got = v < v1 ? logits[0][static_cast<size_t>(r * v1 + v)]
                                 : logits[1][static_cast<size_t>(r * (nv - v1) + v - v1)];
        const float ref = want[static_cast<size_t>(r * nv + v)];
        worst = std::max(worst, std::abs(static_cast<double>(got) - ref));
        scale = std::max(scale, std::abs(static_cast<double>(ref)));
      }
    }
    EXPECT_LT(worst, 1e-4 * scale) << preset << ": worst " << worst << " of logits up to " << scale;
  }
}

TEST(PartialModel, SlicesThatCannotBeCutAreRefusedWithTheReason) {
  const ModelFile file = synth_model("tiny-llama", TensorType::Q8_0);  // 4 layers, 8 heads, 2 KV heads
  const auto ctx = test::make_test_context(1);
  auto refused = [&](ModelSlice s, const std::string& reason, const ModelFile* f = nullptr) {
    try {
      Model m(f ? *f : file, ctx, s);
      ADD_FAILURE() << "slice accepted; expected: " << reason;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  refused({2, 2}, "layers [2, 2)");
  refused({0, 9}, "model's 4");
  refused({0, -1, 0, 3}, "8 attention heads do not divide by 3");
  refused({0, -1, 2, 2}, "rank 2 of 2");
  const ModelFile k_quant = synth_model("tiny-llama", TensorType::Q4_K);
  refused({0, -1, 1, 2}, "inside a quantization block of 256", &k_quant);  // head 4 * 32 = column 128
  // 8 ranks of one query head each: every rank keeps the one KV head its head reads (replicated).
  EXPECT_NO_THROW(Model(file, ctx, {0, -1, 7, 8}));
  // 12 heads and 4 KV heads over 6 ranks: a rank's 2 heads would straddle two GQA groups of 3.
  ModelConfig c = Model(file, ctx).config();
  c.n_heads = 12;
  c.n_kv_heads = 4;
  try {
    resolve_slice(c, {0, -1, 0, 6});
    ADD_FAILURE() << "GQA groups split across ranks accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("4 KV heads cannot be split across 6"), std::string::npos) << e.what();
  }
}

// The split rules are one function: a grid is refused by split_refusal exactly when some rank's
// slice of it (stage_slice, resolve_slice) is refused, with the same reason.
TEST(PartialModel, SplitRefusalIsWhatEveryRanksSliceFinds) {
  const ModelFile dense = synth_model("tiny-llama", TensorType::Q8_0);  // 4 layers, 8 heads, 2 KV heads
  const ModelFile moe = synth_model("tiny-mixtral", TensorType::Q8_0);
  int refused = 0, accepted = 0;
  for (const ModelFile* file : {&dense, &moe}) {
    const ModelConfig c = ModelConfig::from_model_file(*file);
    for (int64_t tp = 1; tp <= 9; ++tp) {
      for (int64_t pp = 1; pp <= 6; ++pp) {
        for (const bool ep : {false, true}) {
          const SplitGrid grid{tp, pp, ep ? tp : 0};
          for (const int64_t block : {int64_t{1}, int64_t{256}}) {
            const std::optional<std::string> why = split_refusal(split_dims(c), grid, block);
            std::optional<std::string> found;
            try {
              for (int64_t stage = 0; stage < pp; ++stage) {
                for (int64_t r = 0; r < tp; ++r) resolve_slice(c, stage_slice(c.n_layers, grid, stage, r), block);
              }
            } catch (const UsageError& e) {
              found = e.what();
            }
            EXPECT_EQ(why, found) << c.arch_name << " tp " << tp << " pp " << pp << " ep " << ep << " block " << block;
            (why ? refused : accepted) += 1;
          }
        }
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace peregrine
