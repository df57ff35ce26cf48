// `peregrine perplexity`: the figure against one computed here from the reference forward pass
// with llama-perplexity's rules restated, the same bits whatever the threads and batch split,
// the saved-logits round trip (a run against itself: KL divergence 0, same top token everywhere),
// and one clear error for each kind of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "common/test_paths.h"
#include "format/gguf.h"
#include "reference/reference_forward.h"

namespace peregrine::test {
namespace {

std::string demo_model() { return (source_dir() / "models/demo-target.gguf").string(); }
// Any English text of a few thousand tokens; the tests compare runs with each other or with the
// reference on the same text, never with a recorded figure.
std::string text_file() { return (source_dir() / "README.md").string(); }

nlohmann::json perplexity_json(std::vector<std::string> args) {
  args.insert(args.begin(), "perplexity");
  args.push_back("--json");
  const Result r = peregrine(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
}

std::vector<int32_t> tokenize(const std::string& model, const std::string& file) {
  const Result r = peregrine({"tokenize", model, "-f", file});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<int32_t> ids;
  std::istringstream in(r.out);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

// The rules restated: windows of ctx tokens over the text's tokens (BOS first), the first token
// of each replaced by BOS, positions [ctx/2, ctx - 1) scored against the next token; the
// reference forward in double, log-softmax in double.
TEST(CliPerplexity, MatchesTheReferenceForwardWithLlamaCppsWindows) {
  const int64_t ctx = 24, windows = 3;
  const std::vector<int32_t> tokens = tokenize(demo_model(), text_file());
  ASSERT_GE(static_cast<int64_t>(tokens.size()), ctx * windows);
  const ModelFile file = read_gguf(demo_model());
  const int32_t bos = tokens[0];  // the demo tokenizer adds BOS
  double nll = 0;
  int64_t count = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> win(tokens.begin() + w * ctx, tokens.begin() + (w + 1) * ctx);
    win[0] = bos;
    const auto logits = reference_forward(file, win);
    for (int64_t j = ctx / 2; j < ctx - 1; ++j) {
      const std::vector<double>& l = logits[static_cast<size_t>(j)];
      double max = l[0], sum = 0;
      for (double v : l) max = std::max(max, v);
      for (double v : l) sum += std::exp(v - max);
      nll += max + std::log(sum) - l[static_cast<size_t>(win[static_cast<size_t>(j + 1)])];
      ++count;
    }
  }
  const double want = std::exp(nll / static_cast<double>(count));
  // f32 KV and f32 activations: the engine's forward is the reference's up to f32 rounding.
  const auto j = perplexity_json({demo_model(), "-f", text_file(), "--ctx", std::to_string(ctx), "--chunks",
                                  std::to_string(windows), "--kv-type", "f32", "--activations", "f32"});
  EXPECT_EQ(j["scored"].get<int64_t>(), count);
  EXPECT_EQ(j["windows"].get<int64_t>(), windows);
  EXPECT_NEAR(j["perplexity"].get<double>(), want, 1e-4 * want);
  EXPECT_GT(j["perplexity_error"].get<double>(), 0);
}

// Threads and batch splits change nothing: the same perplexity to the last bit, and logits saved
// by one run compare with another's at a KL divergence of exactly 0.
TEST(CliPerplexity, DeterministicAcrossThreadsAndBatchSplits) {
  const auto dir = scratch_dir("cli-perplexity-det");
  const std::string base = (dir / "base.logits").string();
  const std::vector<std::string> common = {demo_model(), "-f", text_file(), "--ctx", "64", "--chunks", "5"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const auto first = perplexity_json(with({"-t", "1", "--save-logits", base}));
  // Parts of a window per call (7 tokens), several windows and a part (200), all in one (512).
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"-t", "2", "-b", "7"}, {"-t", "2", "-b", "200"}, {"-t", "2", "-b", "512"}, {"-t", "1", "-b", "64"}}) {
    const auto j = perplexity_json(with(extra));
    EXPECT_EQ(j["perplexity"].get<double>(), first["perplexity"].get<double>()) << extra[1] << " " << extra[3];
  }
  const auto k = perplexity_json({demo_model(), "--kl-divergence", base, "-t", "2", "-b", "7"})["kl_divergence"];
  EXPECT_EQ(k["mean_kld"].get<double>(), 0.0);
  EXPECT_EQ(k["max_kld"].get<double>(), 0.0);
  EXPECT_EQ(k["same_top"].get<double>(), 1.0);
  EXPECT_EQ(k["delta_perplexity"].get<double>(), 0.0);
}

// A quantized run against the f32 base: a small positive divergence, reported with its spread,
// and the top-K file's figure a lower bound close to the whole distribution's.
TEST(CliPerplexity, KlDivergenceOfQuantizedWeights) {
  const auto dir = scratch_dir("cli-perplexity-kld");
  const std::string whole = (dir / "whole.logits").string(), top = (dir / "top.logits").string();
  const std::vector<std::string> text = {"-f", text_file(), "--ctx", "64", "--chunks", "4"};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.begin(), demo_model());
    a.insert(a.end(), text.begin(), text.end());
    return a;
  };
  const auto base = perplexity_json(args({"--save-logits", whole}));
  perplexity_json(args({"--save-logits", top, "--save-top-k", "16"}));
  // The demo vocabulary has 1024 tokens: whole distributions, 4 bytes per token and position.
  const auto positions = base["scored"].get<int64_t>();
  EXPECT_GT(static_cast<int64_t>(std::filesystem::file_size(whole)), positions * 1024 * 4);
  EXPECT_LT(static_cast<int64_t>(std::filesystem::file_size(top)), positions * (16 * 8 + 12) + 4 * 64 * 4 + 200);

  const auto q = perplexity_json(args({"--type", "q4_0", "--kl-divergence", whole}));
  const auto k = q["kl_divergence"];
  EXPECT_GT(k["mean_kld"].get<double>(), 1e-5);
  EXPECT_LT(k["mean_kld"].get<double>(), 0.5);
  EXPECT_GT(k["mean_kld_error"].get<double>(), 0);
  EXPECT_LE(k["median_kld"].get<double>(), k["p99_kld"].get<double>());
  EXPECT_LE(k["p99_kld"].get<double>(), k["max_kld"].get<double>());
  EXPECT_GT(k["same_top"].get<double>(), 0.5);
  EXPECT_LE(k["same_top"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(k["perplexity_base"].get<double>(), base["perplexity"].get<double>());
  EXPECT_NEAR(k["delta_perplexity"].get<double>(), q["perplexity"].get<double>() - base["perplexity"].get<double>(),
              1e-9);
  const auto kt = perplexity_json(args({"--type", "q4_0", "--kl-divergence", top}))["kl_divergence"];
  EXPECT_LE(kt["mean_kld"].get<double>(), k["mean_kld"].get<double>() * (1 + 1e-9));
  EXPECT_GT(kt["mean_kld"].get<double>(), 0.5 * k["mean_kld"].get<double>());
  EXPECT_EQ(kt["same_top"].get<double>(), k["same_top"].get<double>());
}

void expect_error(const std::vector<std::string>& args, int code, const std::string& says) {
  std::vector<std::string> a = args;
  a.insert(a.begin(), "perplexity");
  const Result r = peregrine(a);
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliPerplexity, BadInputGetsOneClearError) {
  const auto dir = scratch_dir("cli-perplexity-bad");
  const std::string shorty = (dir / "short.txt").string(), other = (dir / "other.txt").string();
  std::ofstream(shorty) << "It is a truth universally acknowledged.";
  std::ofstream(other) << std::string(20000, 'x');
  expect_error({demo_model(), "-f", (dir / "missing.txt").string()}, 2, "missing.txt");
  expect_error({demo_model()}, 2, "-f TEXT");
  expect_error({demo_model(), "-f", shorty}, 2, "need at least 512");
  expect_error({demo_model(), "-f", text_file(), "--ctx", "4096"}, 2, "context length 256");
  expect_error({demo_model(), "-f", text_file(), "--kv-type", "f8"}, 2, "unknown --kv-type");
  expect_error({demo_model(), "-f", text_file(), "--activations", "int4"}, 2, "--activations");

  // A base from another text, another vocabulary, and files that are not (whole) logits files.
  const std::string base = (dir / "base.logits").string();
  ASSERT_EQ(peregrine({"perplexity", demo_model(), "-f", text_file(), "--ctx", "32", "--chunks", "2",
                       "--save-logits", base}).exit_code, 0);
  expect_error({demo_model(), "-f", other, "--kl-divergence", base}, 2, "another text");
  expect_error({demo_model(), "--kl-divergence", base, "--ctx", "64"}, 2, "differs from the saved run's 32");
  const std::string stories = (dir / "stories.gguf").string();
  const auto s = shared_file("models/stories260K");
  ASSERT_EQ(peregrine({"convert", (s / "stories260K.bin").string(), "--tokenizer", (s / "tok512.bin").string(), "-o",
                       stories}).exit_code, 0);
  expect_error({stories, "--kl-divergence", base}, 2, "another vocabulary");
  // Files that are not what they claim are format errors (exit 1), as bad model files are.
  expect_error({demo_model(), "--kl-divergence", text_file()}, 1, "is not a logits file");
  const std::string cut = (dir / "cut.logits").string();
  std::filesystem::copy_file(base, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(base) - 3);
  expect_error({demo_model(), "--kl-divergence", cut}, 1, "truncated or corrupt");
  expect_error({demo_model(), "-f", text_file(), "--save-logits", (dir / "no/such/dir/x").string()}, 2, "cannot write");
}

}  // namespace
}  // namespace peregrine::test
