// The optimized Model against the independent scalar reference, on synthetic models of every
// architecture and KV-head layout and every weight type. The prompt runs as one batch, then a few
// single-token decode steps read the KV cache; every row's logits must match the reference run
// on the whole sequence at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "backend/cpu_context.h"
#include "common/forced_isa.h"
#include "common/test_paths.h"
#include "format/gguf.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "reference/reference_forward.h"
#include "synth/synthetic.h"
#include "tiny_specs.h"

namespace peregrine {
namespace {

constexpr int kPromptLen = 7;
constexpr int kDecodeSteps = 3;

// max_v |model[v] - ref[v]| / max_v |ref[v]|: the error relative to the row's largest logit, so
// near-zero logits don't blow it up and a logit that matters can't hide.
double relative_error(std::span<const float> model, const std::vector<double>& ref) {
  double max_ref = 0, max_diff = 0;
  for (size_t v = 0; v < ref.size(); ++v) {
    max_ref = std::max(max_ref, std::abs(ref[v]));
    max_diff = std::max(max_diff, std::abs(double(model[v]) - ref[v]));
  }
  return max_diff / max_ref;
}

// Deterministic, spread-out token ids (never the same token twice in a row).
std::vector<int32_t> token_sequence(int64_t n_vocab, int n, uint32_t salt) {
  std::vector<int32_t> out = {1};  // BOS
  uint32_t x = 2463534242u ^ salt;
  while (int(out.size()) < n) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    out.push_back(int32_t(x % uint32_t(n_vocab)));
  }
  return out;
}

// Runs the Model on `tokens` (prompt in one batch, then single-token steps) and returns the
// logits of every position, [T][n_vocab].
// F32 activations are exact (compared at 1e-5); Q8 ones are the default fast path.
std::vector<std::vector<float>> model_logits(const ModelFile& file, const std::vector<int32_t>& tokens,
                                             Activations act = Activations::F32) {
  Model model(file, std::make_shared<CpuContext>(physical_core_count(), act));
  const int64_t n_vocab = model.config().n_vocab;
  KvCache kv = model.make_kv_cache(KvType::F32, 4, 4);  // several blocks: decode crosses block edges
  EXPECT_TRUE(kv.pool().reserve(0, int64_t(tokens.size())));
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  Batch prompt;
  for (int i = 0; i < kPromptLen; ++i) prompt.add(tokens[size_t(i)], i, 0, true);
  model.forward(prompt, kv, logits);
  EXPECT_EQ(logits.size(), size_t(kPromptLen * n_vocab));
  for (int i = 0; i < kPromptLen; ++i)
    rows.emplace_back(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab);
  for (size_t i = kPromptLen; i < tokens.size(); ++i) {
    Batch step;
    step.add(tokens[i], int32_t(i), 0, true);
    model.forward(step, kv, logits);
    EXPECT_EQ(logits.size(), size_t(n_vocab));
    rows.push_back(logits);
  }
  return rows;
}

// Bound for Model vs reference on the SAME file. Both paths dequantize identical bytes to
// identical f32 weights (the Model's matmul keeps activations in f32; nothing is re-quantized),
// so the weight type cannot matter: the only differences are f32 vs double arithmetic and
// summation order. A length-n f32 dot product has relative error about sqrt(n) * 2^-24 ~ 1.3e-6
// for n = 512 (the longest row here; worst case n * 2^-24 = 3e-5), and two layers of residual
// blocks plus norms, softmax and RoPE add a few such terms: a few 1e-6. Measured: <= 9e-7 for
// every spec and type. 1e-5 (10x tighter than the 1e-4 acceptance bound) leaves margin for
// another summation order and still catches any real mistake (a wrong RoPE pair, a missing
// bias or a wrong KV head give errors of order 1e-1; dropping the Llama 3 rope factors gives
// only ~1.5e-3 at these short positions, since they scale the slow frequencies).
constexpr double kSameFileBound = 1e-5;

// Bound for a quantized model against its F32 original (same seed: the same real weights before
// rounding). Per-weight rounding error, rms relative to the weights' sigma (N(0, sigma) weights;
// the absmax of a 16/32-element block is ~1.8/2.1 sigma; a uniform rounding error of step h has
// rms h/sqrt(12)):
//   F16  relative 2^-11 / sqrt(3)                                      ~ 2.8e-4
//   BF16 relative 2^-8 / sqrt(3)                                       ~ 2.3e-3
//   Q8_0 step absmax(32)/127 ~ 0.017 sigma                             ~ 5e-3
//   Q6_K step absmax(16)/32  ~ 0.055 sigma (+ 8-bit sub-block scales)  ~ 1.7e-2
//   Q4_0 step absmax(32)/8   ~ 0.27 sigma                              ~ 8e-2
//   Q4_K 16 levels over [min, max] of 32 ~ 0.28 sigma                  ~ 8e-2
// The errors are independent; they pass through ~9 matmuls per token (2 layers x attention
// (q, k, v, o) and FFN (gate, up, down), plus the head) and softmax, which amplify the logits'
// error relative to the row max by a factor measured at 4-8 for these random models. The bounds
// are 10x the per-weight figure (Q6_K 12x). Q4 bounds are necessarily loose: these tiny random
// models have no redundancy to absorb 4-bit noise (measured 0.26-0.52).
const std::map<TensorType, double> kVsF32Bound = {
    {TensorType::F16, 3e-3}, {TensorType::BF16, 2.5e-2}, {TensorType::Q8_0, 6e-2},
    {TensorType::Q6_K, 0.2}, {TensorType::Q4_0, 0.8},    {TensorType::Q4_K, 0.8},
    // The other types scaled by their rms weight error next to Q4_K's (~8e-2 relative; measured
    // with the quantizers on N(0, 1) rows): Q4_1, IQ4_NL, IQ4_XS about the same; Q5_0, Q5_1, Q5_K
    // about half (dense models measured <= 0.25; 0.6 because a mixture of experts' worst
    // position carries routing flips, kRoutingFlipBound's story: up to 0.52 on qwen3moe); Q3_K
    // twice; Q2_K four times (its bound says little beyond "not garbage").
    {TensorType::Q4_1, 0.8}, {TensorType::IQ4_NL, 0.8},  {TensorType::IQ4_XS, 0.8},
    {TensorType::Q5_0, 0.6}, {TensorType::Q5_1, 0.6},    {TensorType::Q5_K, 0.6},
    {TensorType::Q3_K, 1.6}, {TensorType::Q2_K, 3.2},
};

// Bound for the default Q8-activation path (has_int8_dot weights) against the reference on the
// same file: rounding each activation block to 8 bits has the same relative rms as Q8_0 weight
// rounding (step absmax(32)/127, ~5e-3 relative), so it gets Q8_0's bound above.
constexpr double kQ8ActivationBound = 6e-2;

// Mixtures of experts route discontinuously: where a token's k-th and (k+1)-th expert
// probabilities are closer than the rounding noise that reaches the router (measured: ~2 of 20
// token-layers have gaps under 0.01 with these random routers), a rounded path may pick the other
// expert (seen with a debug print of the choices: tiny-qwen2moe, Q8 activations, token 5 of
// layer 1, logit gap 0.002). The output then moves by that expert's weight (the k-th largest,
// 0.1-0.3 here) times the difference of the two experts' outputs: measured up to 0.12 of the row's
// largest logit. So for MoE models the rounded paths are held to the dense bound at the median
// position (most route alike) and to this at the worst one. The exact comparison (kSameFileBound,
// every position) is what pins the MoE arithmetic and routing; the llama.cpp oracle checks tokens.
constexpr double kRoutingFlipBound = 0.3;

// The error of every position against its reference row.
std::vector<double> position_errors(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& ref) {
  std::vector<double> e;
  for (size_t t = 0; t < ref.size(); ++t) e.push_back(relative_error(got[t], ref[t]));
  return e;
}

// Checks `errors` against `bound` (MoE: the median against it, the worst against the routing-flip
// bound); returns the worst.
double expect_within(std::vector<double> errors, double bound, bool moe) {
  std::sort(errors.begin(), errors.end());
  if (moe) {
    EXPECT_LE(errors[errors.size() / 2], bound) << "median position";
    EXPECT_LE(errors.back(), std::max(bound, kRoutingFlipBound)) << "worst position";
  } else {
    EXPECT_LE(errors.back(), bound);
  }
  return errors.back();
}

class ModelVsReference : public ::testing::TestWithParam<SyntheticSpec> {};

TEST_P(ModelVsReference, EveryWeightTypeMatches) {
  PEREGRINE_SKIP_IF_FORCED_ISA_UNAVAILABLE();  // ctest runs this once per kernel path
  const SyntheticSpec& spec = GetParam();
  const auto dir = test::scratch_dir("model_vs_reference_" + spec.name + "_" + test::forced_isa_run_name());
  const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q8_0,
                              TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K,   TensorType::Q4_1,
                              TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K,
                              TensorType::Q3_K, TensorType::Q5_K, TensorType::IQ4_XS};
  {
    const auto tokens = token_sequence(spec.n_vocab, kPromptLen + kDecodeSteps, uint32_t(spec.n_vocab));
    std::vector<std::vector<double>> f32_reference;
    for (TensorType type : types) {
      SCOPED_TRACE(spec.name + " " + std::string(tensor_type_name(type)));
      const auto path = dir / (spec.name + "-" + std::string(tensor_type_name(type)) + ".gguf");
      write_synthetic_gguf(spec, type, 42, path);
      const ModelFile file = read_gguf(path);
      const auto ref = reference_forward(file, tokens);
      const auto got = model_logits(file, tokens);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t t = 0; t < ref.size(); ++t) ASSERT_EQ(got[t].size(), ref[t].size());
      const std::vector<double> errors = position_errors(got, ref);
      const double worst = *std::max_element(errors.begin(), errors.end());
      EXPECT_LE(worst, kSameFileBound);
      double worst_q8 = 0, worst_vs_f32 = 0;
      if (has_int8_dot(type)) {
        worst_q8 = expect_within(position_errors(model_logits(file, tokens, Activations::Q8), ref),
                                 kQ8ActivationBound, spec.is_moe());
        EXPECT_GT(worst_q8, 1e-6);  // the integer path really ran
      }
      if (type == TensorType::F32) {
        f32_reference = ref;
      } else {
        worst_vs_f32 = expect_within(position_errors(got, f32_reference), kVsF32Bound.at(type), spec.is_moe());
        // Quantization must change something, or the "quantized" path silently ran F32.
        EXPECT_GT(worst_vs_f32, 1e-6);
      }
      std::printf("%-22s %-5s vs ref %.2e  vs f32 %.2e  q8 activations vs ref %.2e\n", spec.name.c_str(),
                  std::string(tensor_type_name(type)).c_str(), worst, worst_vs_f32, worst_q8);
    }
  }
}

std::string spec_test_name(const ::testing::TestParamInfo<SyntheticSpec>& info) {
  std::string n = info.param.name;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(TinySpecs, ModelVsReference, ::testing::ValuesIn(test::tiny_specs()), spec_test_name);
// Mixtures of experts: the router, the grouped experts and the shared expert against the
// reference's per-token loop over its experts.
INSTANTIATE_TEST_SUITE_P(TinyMoeSpecs, ModelVsReference, ::testing::ValuesIn(test::tiny_moe_specs()), spec_test_name);
// Qwen3's per-head q/k norms and Phi-3's fused QKV and gate/up matrices (read as row ranges).
INSTANTIATE_TEST_SUITE_P(TinyQwen3Phi3Specs, ModelVsReference, ::testing::ValuesIn(test::tiny_qwen3_phi3_specs()),
                         spec_test_name);
// Sliding windows and Gemma 2 / 3: the window, soft-caps, GeGLU, post-norms, scaled embeddings and
// gemma3's two RoPEs against the reference's plain loops.
INSTANTIATE_TEST_SUITE_P(TinyWindowSpecs, ModelVsReference, ::testing::ValuesIn(test::tiny_window_specs()),
                         spec_test_name);

}  // namespace
}  // namespace peregrine
