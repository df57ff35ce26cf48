// Qwen3 and Phi-3 as Hugging Face folders: a synthetic GGUF exported by the project's own exporter
// (training/export_hf.py: q_norm/k_norm, the fused qkv_proj and gate_up_proj, no RoPE permutation)
// and read back by read_hf_checkpoint must run to the same logits as the GGUF, bit for bit (the
// same f32 weights, the same kernels).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "backend/cpu_context.h"
#include "common/test_paths.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "model/model.h"
#include "synth/synthetic.h"

namespace peregrine {
namespace {

std::vector<float> logits_of(ModelFile file) {
  Model model(std::move(file), std::make_shared<CpuContext>(1, Activations::F32));
  KvCache kv = model.make_kv_cache(KvType::F32, 4, 4);
  EXPECT_TRUE(kv.pool().reserve(0, 8));
  Batch b;
  for (int i = 0; i < 6; ++i) b.add(static_cast<TokenId>((37 * i + 5) % model.config().n_vocab), i, 0, true);
  std::vector<float> logits;
  model.forward(b, kv, logits);
  return logits;
}

class HfArchFolder : public ::testing::TestWithParam<const char*> {};

TEST_P(HfArchFolder, ExportedFolderRunsLikeItsGguf) {
  const std::string preset = GetParam();
  const auto dir = test::scratch_dir("hf_arch_" + preset);
  const auto gguf = dir / (preset + ".gguf");
  const auto folder = dir / "folder";
  std::filesystem::remove_all(folder);
  write_synthetic_gguf(*synthetic_preset(preset), TensorType::F32, 3, gguf);
  const std::string cmd = "python3 '" + (test::source_dir() / "training" / "export_hf.py").string() + "' '" +
                          gguf.string() + "' '" + folder.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const ModelFile hf = read_hf_checkpoint(folder);
  const std::string arch = hf.meta.get_string("general.architecture");
  EXPECT_EQ(arch, preset == "tiny-qwen3" ? "qwen3" : "phi3");
  if (arch == "phi3") {
    EXPECT_NE(hf.find("blk.0.attn_qkv.weight"), nullptr);
    EXPECT_EQ(hf.find("blk.0.ffn_gate.weight"), nullptr);
  } else {
    EXPECT_NE(hf.find("blk.0.attn_k_norm.weight"), nullptr);
  }
  const std::vector<float> want = logits_of(read_gguf(gguf)), got = logits_of(hf);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Qwen3Phi3, HfArchFolder, ::testing::Values("tiny-qwen3", "tiny-phi3"),
                         [](const auto& info) { return std::string(info.param[5] == 'q' ? "qwen3" : "phi3"); });

}  // namespace
}  // namespace peregrine
