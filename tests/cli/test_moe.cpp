// Mixtures of experts through the real binary: synth presets that run, Mixtral's real shape as a
// header-only file that `info` and `kv-calc` read, `bench`'s expert accounting, and broken files
// that end in one clear line and exit 1.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/test_paths.h"
#include "format/gguf.h"

namespace peregrine::test {
namespace {

std::string synth(const std::string& preset, const std::string& type, const std::filesystem::path& dir) {
  const auto path = (dir / (preset + "-" + type + ".gguf")).string();
  Result s = peregrine({"synth", "--preset", preset, "--type", type, "--seed", "4", "-o", path});
  EXPECT_EQ(s.exit_code, 0) << s.err;
  return path;
}

TEST(CliMoe, TinyPresetsRunAndInfoShowsTheExperts) {
  const auto dir = scratch_dir("cli-moe-tiny");
  for (const auto& [preset, want] : {std::pair{"tiny-mixtral", "experts:          8 per layer, 2 per token"},
                                     {"tiny-qwen2moe", "experts:          16 per layer, 4 per token, expert ffn dim 128; "
                                                       "shared expert ffn dim 512 (sigmoid gate)"},
                                     {"tiny-qwen3moe", "experts:          8 per layer, 2 per token, expert ffn dim 256"}}) {
    SCOPED_TRACE(preset);
    const std::string path = synth(preset, "q4_0", dir);
    Result info = peregrine({"info", path});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find(want), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("active/token:"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("ties: lowest index"), std::string::npos) << info.out;
    Result run = peregrine({"run", path, "-p", "hello there", "-n", "6", "--temperature", "0", "--ignore-eos", "--json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(nlohmann::json::parse(run.out)["tokens"].size(), 6u);
  }
  Result qwen2 = peregrine({"info", (dir / "tiny-qwen2moe-q4_0.gguf").string()});
  EXPECT_NE(qwen2.out.find("weights not renormalized"), std::string::npos) << qwen2.out;
  Result qwen3 = peregrine({"info", (dir / "tiny-qwen3moe-q4_0.gguf").string()});
  EXPECT_NE(qwen3.out.find("q/k RMSNorm"), std::string::npos) << qwen3.out;
  EXPECT_NE(qwen3.out.find("renormalized to sum 1"), std::string::npos) << qwen3.out;
}

// Mixtral 8x7B is 26 GB at Q4_0: too large to generate here, so the file is written with its data
// region as a hole; its shape still loads.
TEST(CliMoe, MixtralHeaderOnlyForInfoAndKvCalc) {
  const auto dir = scratch_dir("cli-moe-mixtral");
  const auto path = (dir / "mixtral.gguf").string();
  Result s = peregrine({"synth", "--preset", "mixtral-8x7b", "--type", "q4_0", "--header-only", "-o", path});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GT(st.st_size, 26'000'000'000);                       // the whole data region, as a hole
  EXPECT_LT(static_cast<int64_t>(st.st_blocks) * 512, 64 << 20);  // but almost nothing on disk
  Result info = peregrine({"info", path});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("experts:          8 per layer, 2 per token, expert ffn dim 14336"), std::string::npos)
      << info.out;
  // 46.70 B parameters, of which a token uses 12.88 B (2 of 8 experts per layer).
  EXPECT_NE(info.out.find("active/token:     12879.93 M of 46702.79 M parameters"), std::string::npos) << info.out;
  Result kv = peregrine({"kv-calc", path, "--context", "32768"});
  ASSERT_EQ(kv.exit_code, 0) << kv.err;
  EXPECT_NE(kv.out.find("GQA (8 KV heads)*"), std::string::npos) << kv.out;
  EXPECT_NE(kv.out.find("128.00 KiB"), std::string::npos) << kv.out;  // 2 * 32 * 8 * 128 * 2 B per token
}

TEST(CliMoe, BenchBoundsDecodeByTheExpertsAStepReads) {
  const auto dir = scratch_dir("cli-moe-bench");
  const std::string path = synth("tiny-qwen2moe", "q8_0", dir);
  Result r = peregrine({"bench", path, "-t", "2", "-p", "16", "-n", "4", "-r", "1", "-b", "1,8", "--batched-steps", "2",
                        "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["tg"]["experts_touched"].get<double>(), 4.0);  // one token: exactly k per layer
  const auto& b1 = j["batched"][0];
  const auto& b8 = j["batched"][1];
  EXPECT_DOUBLE_EQ(b1["experts_touched_expected"].get<double>(), 4.0);
  EXPECT_NEAR(b8["experts_touched_expected"].get<double>(), 16 * (1 - std::pow(12.0 / 16, 8)), 1e-9);
  EXPECT_GT(b8["experts_touched"].get<double>(), 4.0);
  EXPECT_LE(b8["experts_touched"].get<double>(), 16.0);
  // The tg bound reads k experts per layer, so it lies above a bound that read them all.
  EXPECT_LT(j["bytes_read_per_token"].get<double>(), j["model_bytes"].get<double>() * 0.8);
}

// Rewrites a GGUF with its metadata and tensors changed by `edit`.
void rewrite(const std::filesystem::path& from, const std::filesystem::path& to,
             const std::function<void(Metadata&, std::vector<TensorView>&)>& edit) {
  ModelFile f = read_gguf(from);
  edit(f.meta, f.tensors);
  GgufWriter w(f.meta);
  for (const TensorView& t : f.tensors) w.add_tensor_bytes(t.name, t.type, t.shape, t.data);
  w.write(to);
}

TEST(CliMoe, BrokenFilesEndInOneClearLine) {
  const auto dir = scratch_dir("cli-moe-bad");
  const auto good = synth("tiny-mixtral", "q8_0", dir);
  struct Case {
    const char* name;
    std::function<void(Metadata&, std::vector<TensorView>&)> edit;
    const char* want;
  };
  const Case cases[] = {
      {"count0", [](Metadata& m, auto&) { m.set("llama.expert_count", MetaValue::u32(0)); },
       "metadata 'llama.expert_count' = 0 is out of range"},
      {"used9", [](Metadata& m, auto&) { m.set("llama.expert_used_count", MetaValue::u32(9)); },
       "'llama.expert_used_count' = 9 exceeds 'llama.expert_count' = 8"},
      {"missing", [](Metadata&, std::vector<TensorView>& ts) {
         std::erase_if(ts, [](const TensorView& t) { return t.name == "blk.2.ffn_down_exps.weight"; });
       }, "missing tensor 'blk.2.ffn_down_exps.weight'"},
      {"shape", [](Metadata&, std::vector<TensorView>& ts) {
         for (TensorView& t : ts) {
           if (t.name == "blk.1.ffn_up_exps.weight") t.shape = {256, 256, 16};  // same bytes, 16 half-size experts
         }
       }, "tensor 'blk.1.ffn_up_exps.weight' has shape [256, 256, 16], expected [256, 512, 8]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto bad = dir / (std::string(c.name) + ".gguf");
    rewrite(good, bad, c.edit);
    Result r = peregrine({"run", bad.string(), "-p", "hi", "-n", "2"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(bad.filename().string()), std::string::npos) << r.err;
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  }
}

}  // namespace
}  // namespace peregrine::test
