// What the bf16 path costs in precision, on whole models: the logits of synthetic tiny-llama and
// tiny-llama3 (tied head) models with BF16 and F16 weights under Activations::Q8 (bf16 dot
// products on a CPU with AVX512-BF16) against the same models under Activations::F32 (the exact
// path), and the cross-entropy of a fixed token sequence. And the invariance the path promises:
// a prompt's logits the same bits whether its tokens run as one batch or one at a time.
// Skipped where the CPU lacks AVX512-BF16.
//
// Tolerances, and why: each product rounds the activations to bf16 (8 significant bits, a
// relative error of at most 2^-9 = 0.2% per element, random in sign) and F16 weights lose 3 of
// their 11 bits the same way; over a dot product of n such terms the errors largely cancel, to
// about 2^-9 / sqrt(3) of the product's norm, and 4 layers compound them. Measured here (seed 5):
// worst logit error 0.5-1.1% of the largest logit (BF16 0.5-0.7%, F16 0.7-1.1%), cross-entropy
// within 0.03%. The bounds below (3% and 0.5%) leave room for other seeds and shapes while
// failing on a real defect (a wrong row, a dropped chunk or a mis-rounded operand moves logits by
// tens of percent).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_context.h"
#include "common/test_paths.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "synth/synthetic.h"

namespace peregrine {
namespace {

constexpr int kPrompt = 24;

TokenId token_at(int i, int64_t n_vocab) { return static_cast<TokenId>((37 * i + 11) % n_vocab); }

// Logits of every prompt position: as one batch, or one token per forward call.
std::vector<float> prompt_logits(const std::filesystem::path& path, Activations act, bool one_by_one) {
  Model m(open_model_file(path), std::make_shared<CpuContext>(2, act));
  KvCache kv = m.make_kv_cache(KvType::F32, 16, 4);
  EXPECT_TRUE(kv.pool().reserve(0, kPrompt));
  std::vector<float> all, logits;
  Batch b;
  for (int i = 0; i < kPrompt; ++i) {
    b.add(token_at(i, m.config().n_vocab), i, 0, true);
    if (!one_by_one && i + 1 < kPrompt) continue;
    m.forward(b, kv, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    b.clear();
  }
  return all;
}

// Mean cross-entropy (nats) of predicting token i + 1 from the logits at position i.
double cross_entropy(const std::vector<float>& logits, int64_t n_vocab) {
  double sum = 0;
  for (int i = 0; i + 1 < kPrompt; ++i) {
    const float* row = logits.data() + i * n_vocab;
    const float top = *std::max_element(row, row + n_vocab);
    double z = 0;
    for (int64_t v = 0; v < n_vocab; ++v) z += std::exp(static_cast<double>(row[v] - top));
    sum += std::log(z) + top - row[token_at(i + 1, n_vocab)];
  }
  return sum / (kPrompt - 1);
}

TEST(Bf16Precision, LogitsWithinToleranceOfF32AndInvariantToBatching) {
  if (!uses_bf16_dot(TensorType::BF16, active_isa(), Activations::Q8)) {
    GTEST_SKIP() << "skipped: this CPU (or PEREGRINE_ISA / PEREGRINE_BF16) has no AVX512-BF16 path";
  }
  const auto dir = test::scratch_dir("kernels_bf16_precision");
  for (const char* preset : {"tiny-llama", "tiny-llama3"}) {
    const auto spec = synthetic_preset(preset);
    ASSERT_TRUE(spec.has_value());
    for (TensorType type : {TensorType::BF16, TensorType::F16}) {
      const auto path = dir / (std::string(preset) + "-" + std::string(tensor_type_name(type)) + ".gguf");
      write_synthetic_gguf(*spec, type, 5, path);
      const auto exact = prompt_logits(path, Activations::F32, false);
      const auto bf16 = prompt_logits(path, Activations::Q8, false);
      ASSERT_EQ(exact.size(), bf16.size());
      float worst = 0, largest = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        worst = std::max(worst, std::abs(exact[i] - bf16[i]));
        largest = std::max(largest, std::abs(exact[i]));
      }
      const double ce_exact = cross_entropy(exact, spec->n_vocab), ce_bf16 = cross_entropy(bf16, spec->n_vocab);
      const double ce_rel = std::abs(ce_bf16 - ce_exact) / ce_exact;
      std::printf(
          "[ %s %s: worst logit error %.2e (%.3f%% of the largest logit %.3f), cross-entropy %.5f vs %.5f "
          "(%.4f%%) ]\n",
          preset, std::string(tensor_type_name(type)).c_str(), worst, 100.0 * worst / largest, largest, ce_bf16,
          ce_exact, 100.0 * ce_rel);
      EXPECT_GT(worst, 0.f) << "the bf16 path did not run";
      EXPECT_LT(worst, 0.03f * largest) << preset << " " << tensor_type_name(type);
      EXPECT_LT(ce_rel, 0.005) << preset << " " << tensor_type_name(type);
      // The same prompt a token at a time (decode tiles) gives the bits of the batch (GEMM tiles).
      const auto single = prompt_logits(path, Activations::Q8, true);
      ASSERT_EQ(single.size(), bf16.size());
      EXPECT_EQ(0, std::memcmp(single.data(), bf16.data(), sizeof(float) * bf16.size()))
          << preset << " " << tensor_type_name(type) << ": batch and single-token logits differ";
    }
  }
}

}  // namespace
}  // namespace peregrine
