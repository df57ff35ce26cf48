// `peregrine plan`'s arithmetic (dist/plan.h) against figures worked out by hand.
#include <gtest/gtest.h>

#include "dist/plan.h"
#include "model/model_slice.h"

namespace peregrine::dist {
namespace {

PlanModel params_only(double params) {
  PlanModel m;
  m.params = m.active_params = params;
  m.bytes_per_param = 2;  // f16
  return m;
}

const PlanDevice h100 = *plan_device("h100");
const PlanLink nvlink = *plan_link("nvlink");

TEST(Plan, An8BModelInF16DecodesAbout200TokensPerSecondOnOneH100) {
  // 8e9 x 2 bytes = 16 GB read per token; 16e9 / 3.35e12 B/s = 4.776 ms -> 209.4 tokens/s.
  const PlanFigures f = plan_layout(params_only(8e9), h100, nvlink, {1, 1, 1}, {});
  EXPECT_DOUBLE_EQ(f.weight_bytes, 16e9);
  EXPECT_NEAR(f.decode_memory_s, 4.776e-3, 1e-6);
  EXPECT_NEAR(f.decode_tokens_per_s, 209.4, 0.1);
  EXPECT_TRUE(f.fits);
  // Prefill: 2 x 8e9 FLOPs per token at 989 TFLOP/s = 61812 tokens/s.
  EXPECT_NEAR(f.prefill_tokens_per_s, 61812.5, 1);
}

TEST(Plan, A70BModelInF16Needs140GBMoreThanOne80GBDevice) {
  const PlanFigures one = plan_layout(params_only(70e9), h100, nvlink, {1, 1, 1}, {});
  EXPECT_DOUBLE_EQ(one.weight_bytes, 140e9);
  EXPECT_DOUBLE_EQ(one.usable_bytes, 72e9);  // 90% of 80 GB
  EXPECT_FALSE(one.fits);
  // Two devices hold 70 GB each, within 72 GB; tensor parallelism halves the bytes per token.
  const PlanFigures two = plan_layout(params_only(70e9), h100, nvlink, {2, 1, 1}, {});
  EXPECT_DOUBLE_EQ(two.weight_bytes, 70e9);
  EXPECT_TRUE(two.fits);
  EXPECT_NEAR(two.decode_memory_s, 70e9 * 2 / (2 * 3.35e12), 1e-9);
}

TEST(Plan, Llama3With8BShapeKvBatchAndTensorParallelTraffic) {
  const PlanModel m = *plan_model_preset("llama-3-8b");
  EXPECT_NEAR(m.params, 8.03e9, 0.01e9);
  // K and V: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131072 bytes per token.
  const PlanFigures one = plan_layout(m, h100, nvlink, {1, 1, 1}, {});
  EXPECT_DOUBLE_EQ(one.kv_bytes_per_token, 131072);
  // (72e9 - 16.06e9) / (131072 x 8192 positions) = 52.1 sequences.
  EXPECT_EQ(one.max_batch, 52);
  // Tensor parallel 2: half the KV heads, and per layer two all-reduces of 4096 f16 values, of
  // which a ring sends 2(T-1)/T = 1 x 8192 bytes: 2 x 32 x 8192 = 524288 bytes per token; then
  // each device's half of the logits (128256 / 2 f16 values) goes to the driver, which samples.
  const double logits_half = 128256 / 2 * 2;
  const PlanFigures two = plan_layout(m, h100, nvlink, {2, 1, 1}, {});
  EXPECT_DOUBLE_EQ(two.kv_bytes_per_token, 65536);
  EXPECT_DOUBLE_EQ(two.comm_bytes_per_token, 524288 + logits_half);
  // Each all-reduce: 8192 B / 450 GB/s + 2 x 3 us latency; 64 of them; the step out and the
  // logits back: 2 x 3 us and the logits' bytes.
  EXPECT_NEAR(two.decode_comm_s, 64 * (8192 / 450e9 + 6e-6) + 6e-6 + logits_half / 450e9, 1e-9);
  // peregrine's gather on 2 ranks: one exchange per all-reduce (one latency), the same bytes.
  PlanOptions gather;
  gather.gather_all_reduce = true;
  const PlanFigures two_gather = plan_layout(m, h100, nvlink, {2, 1, 1}, gather);
  EXPECT_DOUBLE_EQ(two_gather.comm_bytes_per_token, 524288 + logits_half);
  EXPECT_NEAR(two_gather.decode_comm_s, 64 * (8192 / 450e9 + 3e-6) + 6e-6 + logits_half / 450e9, 1e-9);
  // Pipeline 2: one hidden state (8 KB) per token crosses the one boundary; the last stage's
  // logits (128256 f16 values) go back to the driver.
  const PlanFigures stages = plan_layout(m, h100, nvlink, {1, 2, 1}, {});
  EXPECT_DOUBLE_EQ(stages.comm_bytes_per_token, 8192 + 2 * logits_half);
  EXPECT_NEAR(stages.weight_bytes, m.params * 2 / 2, 1);
}

TEST(Plan, CutsTheModelCannotTakeAreRefused) {
  const PlanModel m = *plan_model_preset("llama-3-8b");  // 32 heads, 8 KV heads, 32 layers
  EXPECT_TRUE(plan_layout(m, h100, nvlink, {3, 1, 1}, {}).refusal.has_value());
  EXPECT_TRUE(plan_layout(m, h100, nvlink, {1, 64, 1}, {}).refusal.has_value());
  EXPECT_FALSE(plan_layout(m, h100, nvlink, {16, 1, 1}, {}).refusal.has_value());  // KV heads replicated
}

// The planner refuses what the engine refuses, for the engine's reason (model_slice.h's
// split_refusal, the one place the rules live).
TEST(Plan, RefusesACutForTheEnginesReason) {
  const PlanModel m = *plan_model_preset("llama-3-8b");
  const SplitDims dims{m.layers, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, 0};
  for (const PlanLayout l : {PlanLayout{3, 1, 1}, PlanLayout{1, 64, 1}, PlanLayout{16, 1, 1}, PlanLayout{1, 1, 2}}) {
    EXPECT_EQ(plan_layout(m, h100, nvlink, l, {}).refusal, split_refusal(dims, {l.tp, l.pp, l.ep > 1 ? l.ep : 0}))
        << l.tp << "x" << l.pp;
  }
  EXPECT_EQ(m.ffn, 14336);
  EXPECT_NE(plan_layout(m, h100, nvlink, {3, 1, 1}, {}).refusal->find("32 attention heads do not divide by 3"),
            std::string::npos);
  // A mixture of experts is split by spreading its experts (as --ep does), never by cutting them.
  const PlanModel moe = *plan_model_preset("mixtral-8x7b");
  EXPECT_FALSE(plan_layout(moe, h100, nvlink, {2, 1, 2}, {}).refusal.has_value());
  EXPECT_NE(plan_layout(moe, h100, nvlink, {2, 1, 1}, {}).refusal->find("--ep"), std::string::npos);
  EXPECT_TRUE(plan_layout(moe, h100, nvlink, {2, 1, 3}, {}).refusal.has_value());
  for (const PlanLayout& l : candidate_layouts(moe, 16)) {
    EXPECT_FALSE(plan_layout(moe, h100, nvlink, l, {}).refusal.has_value()) << l.tp << "x" << l.pp << " ep " << l.ep;
  }
}

TEST(Plan, MixtureOfExpertsReadsOnlyItsActiveExperts) {
  const PlanModel m = *plan_model_preset("mixtral-8x7b");
  EXPECT_NEAR(m.params, 46.7e9, 0.1e9);
  EXPECT_NEAR(m.active_params, 12.9e9, 0.1e9);
  const PlanFigures f = plan_layout(m, h100, nvlink, {2, 1, 2}, {});
  // Tensor-parallel attention: 32 all-reduces sending 8192 bytes each; experts per layer: of the
  // token's 2 expert outputs, half come from the other rank (8192 bytes), and the sum goes back to
  // it (8192 bytes): per device (1/2) x (2/2 + 1) x 8192; and half the logits to the driver.
  EXPECT_NEAR(f.comm_bytes_per_token, 32 * 8192 + 32 * (0.5 * (2.0 / 2 + 1) * 8192) + 32000 / 2 * 2, 1);
}

}  // namespace
}  // namespace peregrine::dist
