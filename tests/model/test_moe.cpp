// Mixtures of experts: the router's rule on hand-made logits (top-k, ties, gating, normalization),
// the context's expert operations against plain loops, every token getting the same bits alone or
// in any batch and on any thread count, the experts a step runs, partial models, and bad files
// refused with the key or tensor named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu_context.h"
#include "backend/moe_routing.h"
#include "common/test_context.h"
#include "common/test_paths.h"
#include "model/model.h"
#include "model/weight_census.h"
#include "synth/synthetic.h"
#include "util/error.h"

namespace peregrine {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, int64_t k, MoeGating gating = MoeGating::Softmax,
             bool normalize = false, float scale = 1.f) {
  const MoeRouting r{static_cast<int64_t>(logits.size()), k, gating, normalize, scale};
  Routed out{std::vector<int32_t>(static_cast<size_t>(k)), std::vector<float>(static_cast<size_t>(k))};
  route_token(logits, r, out.experts, out.weights);
  return out;
}

std::vector<double> softmax(const std::vector<double>& x) {
  double mx = x[0], sum = 0;
  for (double v : x) mx = std::max(mx, v);
  std::vector<double> p;
  for (double v : x) p.push_back(std::exp(v - mx)), sum += p.back();
  for (double& v : p) v /= sum;
  return p;
}

TEST(MoeRouter, PicksTheLargestAndListsThemInAscendingOrder) {
  const Routed r = route({0.1f, 3.f, -1.f, 2.f, 0.5f}, 2);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  const std::vector<double> p = softmax({0.1, 3, -1, 2, 0.5});
  EXPECT_NEAR(r.weights[0], p[1], 1e-6);  // softmax over all five, not renormalized
  EXPECT_NEAR(r.weights[1], p[3], 1e-6);
  const Routed three = route({5.f, -2.f, 4.f, 4.5f}, 3);
  EXPECT_EQ(three.experts, (std::vector<int32_t>{0, 2, 3}));
  const Routed all = route({1.f, 3.f, 2.f}, 3);  // k == E: every expert
  EXPECT_EQ(all.experts, (std::vector<int32_t>{0, 1, 2}));
}

TEST(MoeRouter, TiesGoToTheLowestIndex) {
  EXPECT_EQ(route({1.f, 1.f, 1.f, 1.f}, 2).experts, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(route({0.f, 2.f, 2.f, 2.f, 1.f}, 2).experts, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(route({3.f, 1.f, 2.f, 2.f}, 2).experts, (std::vector<int32_t>{0, 2}));
  // Selection is on the probabilities, as in llama.cpp: logits far below the best underflow to
  // the same probability 0, and among those the lowest index wins.
  EXPECT_EQ(route({-1000.f, -2000.f, 5.f, -3000.f}, 2).experts, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(route({-3000.f, -2000.f, 5.f, -1000.f}, 2).experts, (std::vector<int32_t>{0, 2}));
}

TEST(MoeRouter, MixtralRenormalizesTheSelectedProbabilities) {
  const Routed r = route({2.f, 1.f, 0.f, -1.f}, 2, MoeGating::Softmax, true);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.weights[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(1.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0, 1e-6);
}

TEST(MoeRouter, SoftmaxAfterSelectionSigmoidAndScale) {
  // Softmax over the k selected logits only: the others do not dilute the weights.
  const Routed after = route({0.f, 3.f, 1.f, 2.5f}, 2, MoeGating::SoftmaxTopK);
  EXPECT_EQ(after.experts, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(after.weights[0], 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
  const Routed sig = route({0.f, 3.f, -1.f, 2.f}, 2, MoeGating::Sigmoid);
  EXPECT_NEAR(sig.weights[0], 1.0 / (1.0 + std::exp(-3.0)), 1e-6);
  EXPECT_NEAR(sig.weights[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  const Routed sig_norm = route({0.f, 3.f, -1.f, 2.f}, 2, MoeGating::Sigmoid, true, 2.5f);
  EXPECT_NEAR(sig_norm.weights[0] + sig_norm.weights[1], 2.5, 1e-5);
  EXPECT_NEAR(sig_norm.weights[0] / sig_norm.weights[1], sig.weights[0] / sig.weights[1], 1e-5);
}

TEST(MoeRouter, NanIsNeverChosenWhileANumberIsLeft) {
  const float nan = std::nanf("");
  EXPECT_EQ(route({nan, 1.f, 0.f}, 1, MoeGating::Sigmoid).experts, (std::vector<int32_t>{1}));
  EXPECT_EQ(route({0.f, nan, 1.f}, 2, MoeGating::SoftmaxTopK).experts, (std::vector<int32_t>{0, 2}));
  const Routed all_nan = route({nan, nan, nan}, 2);  // defined, no crash
  EXPECT_EQ(all_nan.experts, (std::vector<int32_t>{0, 1}));
  std::vector<int32_t> e(2);
  std::vector<float> w(2);
  EXPECT_THROW(route_token(std::vector<float>(3), {3, 4, MoeGating::Softmax, false, 1.f}, e, w), std::invalid_argument);
}

TEST(MoeRouter, TheContextRoutesEveryTokenAsAlone) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  const MoeRouting r{7, 3, MoeGating::Softmax, true, 1.f};
  std::vector<float> logits(5 * 7);
  for (float& v : logits) v = d(rng);
  std::vector<int32_t> experts(5 * 3);
  std::vector<float> weights(5 * 3);
  CpuContext ctx(2);
  ctx.route_experts(logits, r, experts, weights);
  for (int t = 0; t < 5; ++t) {
    const Routed alone = route({logits.begin() + t * 7, logits.begin() + (t + 1) * 7}, 3, r.gating, r.normalize);
    EXPECT_EQ(std::vector<int32_t>(experts.begin() + t * 3, experts.begin() + (t + 1) * 3), alone.experts);
    EXPECT_EQ(0, std::memcmp(weights.data() + t * 3, alone.weights.data(), 3 * sizeof(float)));
  }
}

std::filesystem::path synth_file(const std::string& preset, TensorType type, const std::string& tag) {
  // Per process: ctest runs this file's tests in parallel processes.
  const auto dir = test::scratch_dir("model_moe_" + tag + "_" + std::to_string(::getpid()));
  const auto path = dir / (preset + "-" + std::string(tensor_type_name(type)) + ".gguf");
  write_synthetic_gguf(*synthetic_preset(preset), type, 11, path);
  return path;
}

std::vector<float> random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST(MoeContext, ExpertOpsMatchPlainLoops) {
  const ModelFile file = open_model_file(synth_file("tiny-mixtral", TensorType::Q4_0, "ops"));
  const TensorView& w = file.require("blk.0.ffn_gate_exps.weight");  // {256, 512, 8}
  const int64_t n_in = w.shape[0], n_out = w.shape[1];
  CpuContext ctx(3);
  // 7 grouped rows: experts 0 and 5 have three rows each, expert 2 one, the rest none.
  const std::vector<int64_t> offsets = {0, 3, 3, 4, 4, 4, 7, 7, 7};
  const std::vector<float> x = random_rows(7 * n_in, 5);
  std::vector<float> y(static_cast<size_t>(7 * n_out)), one(static_cast<size_t>(n_out));
  ctx.matmul_experts(w, offsets, x, y);
  for (int64_t e = 0; e < 8; ++e) {
    for (int64_t i = offsets[size_t(e)]; i < offsets[size_t(e) + 1]; ++i) {
      ctx.matmul(w.matrix(e), std::span(x).subspan(size_t(i * n_in), size_t(n_in)), one, 1);
      EXPECT_EQ(0, std::memcmp(one.data(), y.data() + i * n_out, sizeof(float) * size_t(n_out))) << e << " " << i;
    }
  }
  EXPECT_THROW(ctx.matmul_experts(w, std::vector<int64_t>{0, 7}, x, y), std::invalid_argument);

  // gather, combine (each token's rows summed in row order, weighted), sigmoid gate.
  const std::vector<float> rows3 = random_rows(3 * 4, 6);  // 3 tokens of width 4
  const std::vector<int32_t> pick = {2, 0, 2, 1};
  std::vector<float> g(4 * 4), out(3 * 4);
  ctx.gather_rows(rows3, pick, g, 4);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(g[size_t(i * 4 + j)], rows3[size_t(pick[size_t(i)] * 4 + j)]);
  const std::vector<float> scales = {0.5f, 2.f, 0.25f, -1.f};
  ctx.combine_rows(g, pick, scales, out, 4);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(out[size_t(0 * 4 + j)], 0.f + 2.f * g[size_t(1 * 4 + j)]);
    EXPECT_EQ(out[size_t(1 * 4 + j)], 0.f + -1.f * g[size_t(3 * 4 + j)]);
    EXPECT_EQ(out[size_t(2 * 4 + j)], (0.f + 0.5f * g[size_t(j)]) + 0.25f * g[size_t(2 * 4 + j)]);
  }
  std::vector<float> gated = rows3;
  ctx.sigmoid_gate(gated, std::vector<float>{0.f, 2.f, -1.f}, 3);
  for (int t = 0; t < 3; ++t) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(gated[size_t(t * 4 + j)], rows3[size_t(t * 4 + j)] / (1 + std::exp(-std::array{0., 2., -1.}[size_t(t)])), 1e-6);
    }
  }
}

// Logits of sequence 0 (a 6-token prompt, then 2 decode steps): alone on one thread, or sharing
// every step with two other sequences on `threads` threads.
std::vector<float> sequence_logits(const ModelFile& file, int threads, bool crowded) {
  Model m(file, test::make_test_context(threads));
  const auto v = static_cast<int>(m.config().n_vocab);
  KvCache kv = m.make_kv_cache(KvType::F16, 16, 4);
  for (SeqId s : {0, 1, 2}) EXPECT_TRUE(kv.pool().reserve(s, 12));
  std::vector<float> mine, logits;
  auto keep_first = [&](const Batch& b) {  // sequence 0's rows come first in every batch
    const auto n0 = std::count(b.seq_ids.begin(), b.seq_ids.end(), 0);
    mine.insert(mine.end(), logits.begin(), logits.begin() + n0 * v);
  };
  Batch b;
  for (int i = 0; i < 6; ++i) b.add((37 * i + 5) % v, i, 0, true);
  if (crowded) {
    for (int i = 0; i < 9; ++i) b.add((11 * i + 2) % v, i, 1, true);
    b.add(7, 0, 2, true);
  }
  m.forward(b, kv, logits);
  keep_first(b);
  for (int step = 0; step < 2; ++step) {
    b.clear();
    b.add(100 + step, 6 + step, 0, true);
    if (crowded) {
      b.add(200 + step, 9 + step, 1, true);
      b.add(300 + step, 1 + step, 2, true);
    }
    m.forward(b, kv, logits);
    keep_first(b);
  }
  return mine;
}

TEST(MoeModel, EveryTokenGetsTheSameBitsAloneInABatchOrOnAnyThreadCount) {
  for (const auto& [preset, type] : {std::pair{"tiny-mixtral", TensorType::Q4_0}, {"tiny-qwen2moe", TensorType::Q8_0},
                                     {"tiny-qwen3moe", TensorType::Q4_K}, {"tiny-qwen2moe", TensorType::F16}}) {
    SCOPED_TRACE(std::string(preset) + " " + std::string(tensor_type_name(type)));
    const ModelFile file = open_model_file(synth_file(preset, type, "invariance"));
    const std::vector<float> alone = sequence_logits(file, 1, false);
    for (int threads : {1, 2, 3}) {
      const std::vector<float> crowded = sequence_logits(file, threads, true);
      ASSERT_EQ(alone.size(), crowded.size());
      EXPECT_EQ(0, std::memcmp(alone.data(), crowded.data(), sizeof(float) * alone.size())) << threads << " threads";
    }
  }
}

TEST(MoeModel, CountsTheExpertsEachStepRuns) {
  const ModelFile file = open_model_file(synth_file("tiny-qwen2moe", TensorType::Q8_0, "count"));
  Model m(file, test::make_test_context(2));
  const int64_t layers = m.config().n_layers, e = m.config().moe.n_experts(), k = m.config().moe.n_used();
  KvCache kv = m.make_kv_cache(KvType::F16, 16, 4);
  ASSERT_TRUE(kv.pool().reserve(0, 40));
  std::vector<float> logits;
  Batch one;
  one.add(5, 0, 0, true);
  m.forward(one, kv, logits);
  EXPECT_EQ(m.moe_stats().layer_steps, layers);
  EXPECT_EQ(m.moe_stats().experts_run, k * layers);  // one token: exactly its k experts per layer
  m.reset_moe_stats();
  Batch many;
  for (int i = 1; i < 33; ++i) many.add((29 * i) % 2048, i, 0, true);
  m.forward(many, kv, logits);
  EXPECT_EQ(m.moe_stats().layer_steps, layers);
  EXPECT_GT(m.moe_stats().experts_run, k * layers);
  EXPECT_LE(m.moe_stats().experts_run, e * layers);
  EXPECT_DOUBLE_EQ(expected_experts_touched(e, k, 1), static_cast<double>(k));
  EXPECT_NEAR(expected_experts_touched(60, 4, 16), 60 * (1 - std::pow(56.0 / 60, 16)), 1e-9);
}

TEST(MoeModel, LayerRangesBackToBackGiveTheWholeLogitsAndTensorSplitsAreRefused) {
  const ModelFile file = open_model_file(synth_file("tiny-qwen3moe", TensorType::Q8_0, "partial"));
  const auto ctx = test::make_test_context(2);
  Model whole(file, ctx), first(file, ctx, {0, 2}), second(file, ctx, {2, -1});
  KvCache kv_whole = whole.make_kv_cache(KvType::F16, 8, 4), kv_first = first.make_kv_cache(KvType::F16, 8, 4),
          kv_second = second.make_kv_cache(KvType::F16, 8, 4);
  Batch b;
  for (int i = 0; i < 5; ++i) b.add(17 * i + 1, i, 0, true);
  for (KvCache* kv : {&kv_whole, &kv_first, &kv_second}) ASSERT_TRUE(kv->pool().reserve(0, 8));
  std::vector<float> want, hidden, got;
  whole.forward(b, kv_whole, want);
  first.forward_layers(b, kv_first);
  first.copy_hidden(hidden);
  second.forward_layers(b, kv_second, hidden);
  second.compute_logits(b, got);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()));
  try {
    Model rank(file, ctx, {0, -1, 0, 2});
    FAIL() << "a tensor-parallel slice of a mixture of experts was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("mixture-of-experts"), std::string::npos) << e.what();
  }
}

TEST(MoeConfig, EachArchitecturesRoutingAndShape) {
  struct Want {
    const char* preset;
    int64_t e, k, ffe, shared;
    bool normalize, qk_norm;
  };
  for (const Want& w : {Want{"tiny-mixtral", 8, 2, 512, 0, true, false}, Want{"tiny-qwen2moe", 16, 4, 128, 512, false, false},
                        Want{"tiny-qwen3moe", 8, 2, 256, 0, true, true}}) {
    SCOPED_TRACE(w.preset);
    const ModelConfig c = ModelConfig::from_model_file(open_model_file(synth_file(w.preset, TensorType::F16, "config")));
    EXPECT_TRUE(c.is_moe());
    EXPECT_EQ(c.moe.n_experts(), w.e);
    EXPECT_EQ(c.moe.n_used(), w.k);
    EXPECT_EQ(c.moe.expert_ffn_dim, w.ffe);
    EXPECT_EQ(c.moe.shared_ffn_dim, w.shared);
    EXPECT_EQ(c.moe.routing.gating, MoeGating::Softmax);
    EXPECT_EQ(c.moe.routing.normalize, w.normalize);
    EXPECT_EQ(c.moe.routing.scale, 1.f);
    EXPECT_EQ(c.qk_norm, w.qk_norm);
  }
  // Metadata the file carries overrides the architecture's defaults.
  ModelFile f = open_model_file(synth_file("tiny-mixtral", TensorType::F16, "config_keys"));
  f.meta.set("llama.expert_gating_func", MetaValue::u32(3));
  f.meta.set("llama.expert_weights_norm", MetaValue::boolean(false));
  f.meta.set("llama.expert_weights_scale", MetaValue::f32(2.5f));
  const ModelConfig c = ModelConfig::from_model_file(f);
  EXPECT_EQ(c.moe.routing.gating, MoeGating::SoftmaxTopK);
  EXPECT_FALSE(c.moe.routing.normalize);
  EXPECT_EQ(c.moe.routing.scale, 2.5f);
}

// A model built from `file` after `spoil` must fail with a FormatError whose message holds `want`.
void expect_refused(const std::filesystem::path& path, const std::function<void(ModelFile&)>& spoil,
                    const std::string& want) {
  ModelFile f = open_model_file(path);
  spoil(f);
  try {
    Model m(std::move(f), test::make_test_context(1));
    ADD_FAILURE() << "accepted; expected an error naming " << want;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

void erase_tensor(ModelFile& f, const std::string& name) {
  std::erase_if(f.tensors, [&](const TensorView& t) { return t.name == name; });
}

void erase_key(ModelFile& f, const std::string& key) {
  Metadata kept;
  for (const auto& [k, v] : f.meta.entries()) {
    if (k != key) kept.set(k, v);
  }
  f.meta = kept;
}

TEST(MoeBadFiles, RefusedWithTheKeyOrTensorNamed) {
  const auto mixtral = synth_file("tiny-mixtral", TensorType::Q8_0, "bad");
  const auto qwen2 = synth_file("tiny-qwen2moe", TensorType::Q8_0, "bad2");
  auto set_u32 = [](const char* key, uint32_t v) { return [=](ModelFile& f) { f.meta.set(key, MetaValue::u32(v)); }; };
  expect_refused(mixtral, set_u32("llama.expert_count", 0), "'llama.expert_count' = 0");
  expect_refused(mixtral, set_u32("llama.expert_count", 100000), "'llama.expert_count' = 100000");
  expect_refused(mixtral, set_u32("llama.expert_used_count", 9), "'llama.expert_used_count' = 9 exceeds 'llama.expert_count' = 8");
  expect_refused(mixtral, set_u32("llama.expert_used_count", 0), "'llama.expert_used_count' = 0");
  expect_refused(mixtral, [](ModelFile& f) { erase_tensor(f, "blk.1.ffn_up_exps.weight"); },
                 "missing tensor 'blk.1.ffn_up_exps.weight'");
  expect_refused(mixtral, [](ModelFile& f) { erase_tensor(f, "blk.2.ffn_gate_inp.weight"); },
                 "missing tensor 'blk.2.ffn_gate_inp.weight'");
  expect_refused(mixtral,
                 [](ModelFile& f) {  // same bytes, experts' rows and columns swapped
                   for (TensorView& t : f.tensors) {
                     if (t.name == "blk.0.ffn_gate_exps.weight") t.shape = {512, 256, 8};
                   }
                 },
                 "tensor 'blk.0.ffn_gate_exps.weight' has shape [512, 256, 8], expected [256, 512, 8]");
  expect_refused(mixtral,
                 [](ModelFile& f) {
                   for (TensorView& t : f.tensors) {
                     if (t.name == "blk.3.ffn_down_exps.weight") t.shape = {512, 256, 4}, t.data = t.data.first(t.data.size() / 2);
                   }
                 },
                 "tensor 'blk.3.ffn_down_exps.weight' has shape [512, 256, 4], expected [512, 256, 8]");
  expect_refused(mixtral, set_u32("llama.expert_gating_func", 7), "'llama.expert_gating_func' = 7");
  expect_refused(mixtral, set_u32("llama.expert_group_count", 4), "'llama.expert_group_count' = 4");
  expect_refused(mixtral, set_u32("llama.expert_shared_feed_forward_length", 64), "llama.expert_shared_feed_forward_length");
  expect_refused(mixtral, [](ModelFile& f) { f.meta.set("llama.expert_weights_scale", MetaValue::f32(-1.f)); },
                 "llama.expert_weights_scale");
  // A router without expert metadata, and a MoE architecture without its expert count.
  expect_refused(mixtral, [](ModelFile& f) { erase_key(f, "llama.expert_count"); }, "'llama.expert_count' is missing");
  expect_refused(qwen2, [](ModelFile& f) { erase_key(f, "qwen2moe.expert_count"); },
                 "missing metadata key 'qwen2moe.expert_count'");
  expect_refused(qwen2, [](ModelFile& f) { erase_tensor(f, "blk.0.ffn_gate_inp_shexp.weight"); },
                 "missing tensor 'blk.0.ffn_gate_inp_shexp.weight'");
  expect_refused(qwen2, [](ModelFile& f) { erase_tensor(f, "blk.3.ffn_down_shexp.weight"); },
                 "missing tensor 'blk.3.ffn_down_shexp.weight'");
}

}  // namespace
}  // namespace peregrine
