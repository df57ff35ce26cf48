// Runs the real `peregrine` binary as a user would and checks what it prints and its exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/test_paths.h"

namespace peregrine::test {
namespace {

std::string stories_bin() { return shared_file("models/stories260K/stories260K.bin").string(); }
std::string stories_tok() { return shared_file("models/stories260K/tok512.bin").string(); }

// The first 32 of the 256 greedy ids listed in ../shared/models/stories260K/README.md.
const std::vector<int> kGoldenPrefix = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                        401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385};

std::vector<int> json_ids(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

// The commands `peregrine --help` lists: the lines after "commands:", each two spaces, the name,
// then its summary.
std::vector<std::string> listed_commands(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream lines(help.substr(std::min(help.size(), help.find("commands:\n"))));
  std::string line;
  std::getline(lines, line);  // "commands:"
  while (std::getline(lines, line) && line.rfind("  ", 0) == 0) {
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return names;
}

// Every command main.cpp dispatches. A new command fails HelpForEveryCommand until it is added
// here and to README.md's command table.
const std::vector<std::string> kCommands = {"run",     "info",        "tokenize", "convert",    "synth",
                                            "kv-calc", "bench-serve", "bench",    "perplexity", "roofline",
                                            "serve",   "plan",        "pull",     "list"};

TEST(Cli, HelpForEveryCommand) {
  const Result top = peregrine({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const std::vector<std::string> listed = listed_commands(top.out);
  EXPECT_EQ(std::multiset<std::string>(listed.begin(), listed.end()),
            std::multiset<std::string>(kCommands.begin(), kCommands.end()))
      << "peregrine --help lists other commands than this test knows:\n"
      << top.out;
  const std::string readme = slurp(source_dir() / "README.md");
  for (const std::string& c : listed) {
    Result r = peregrine({c, "--help"});
    EXPECT_EQ(r.exit_code, 0) << c << ": " << r.err;
    EXPECT_EQ(r.out.rfind("usage: peregrine " + c + " ", 0), 0u) << c << ":\n" << r.out;
    EXPECT_NE(r.out.find("-h, --help"), std::string::npos) << c;
    EXPECT_NE(readme.find("| `peregrine " + c + " "), std::string::npos)
        << "README.md's command table has no row for " << c;
  }
  Result r = peregrine({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command"), std::string::npos);
}

TEST(Cli, RunGreedyJsonMatchesGolden) {
  Result r = peregrine({"run", stories_bin(), "--tokenizer", stories_tok(), "--temperature", "0", "-n", "32",
                        "--kv-type", "f32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(json_ids(j["prompt_tokens"]), std::vector<int>{1});  // empty prompt → BOS alone
  EXPECT_EQ(json_ids(j["tokens"]), kGoldenPrefix);
  EXPECT_EQ(j["text"].get<std::string>().rfind("Once upon a time", 0), 0u) << j["text"];
  EXPECT_GE(j["ttft_ms"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0.0);
}

// Every command that computes builds its context through backend/backends.h's factory:
// --max-step-ms defaults to the derived budget in both serving commands; a value that is neither
// auto nor milliseconds is a usage error before any model is read.
TEST(Cli, MaxStepMsDefaultsToAutoAndRejectsOtherWords) {
  for (const std::string command : {"bench-serve", "serve"}) {
    const std::string help = peregrine({command, "--help"}).out;
    EXPECT_NE(help.find("--max-step-ms auto|MS"), std::string::npos) << command;
    EXPECT_NE(help.find("(default: auto)"), std::string::npos) << command;
  }
  Result bad = peregrine({"bench-serve", stories_bin(), "--tokenizer", stories_tok(), "--max-step-ms", "soon"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--max-step-ms 'soon': expected auto or milliseconds"), std::string::npos) << bad.err;
  EXPECT_EQ(peregrine({"bench-serve", stories_bin(), "--tokenizer", stories_tok(), "--max-step-ms", "-3"}).exit_code, 2);
}

// --backend names a registered backend (the golden tokens on "cpu"), anything else is a usage
// error listing the choices, in every command that takes the flag.
TEST(Cli, BackendFlagSelectsTheContextEveryComputingCommandBuilds) {
  Result r = peregrine({"run", stories_bin(), "--tokenizer", stories_tok(), "--temperature", "0", "-n", "32",
                        "--kv-type", "f32", "--json", "--backend", "cpu", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_ids(nlohmann::json::parse(r.out)["tokens"]), kGoldenPrefix);
  for (const std::string command : {"run", "bench", "bench-serve", "serve"}) {
    std::vector<std::string> args = {command, stories_bin(), "--backend", "abacus"};
    if (command != "bench") args.insert(args.end(), {"--tokenizer", stories_tok()});
    Result bad = peregrine(args);
    EXPECT_EQ(bad.exit_code, 2) << command << ": " << bad.err;
    EXPECT_NE(bad.err.find("--backend 'abacus': expected cpu"), std::string::npos) << command << ": " << bad.err;
    EXPECT_NE(peregrine({command, "--help"}).out.find("--backend NAME"), std::string::npos) << command;
  }
}

TEST(Cli, RunStreamsTextAndSummary) {
  Result r = peregrine(
      {"run", stories_bin(), "--tokenizer", stories_tok(), "-p", "Once upon a time", "-n", "24", "--seed", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("Once upon a time").size() + 10);
  EXPECT_NE(r.err.find("time to first token"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
}

TEST(Cli, SameSeedSameTextAndNoCacheSameTokens) {
  std::vector<std::string> base = {"run", stories_bin(), "--tokenizer", stories_tok(), "-p",    "The cat",
                                   "-n",  "40",          "--seed",      "1234",        "--json"};
  Result a = peregrine(base);
  Result b = peregrine(base);
  auto nocache = base;
  nocache.push_back("--no-kv-cache");
  Result c = peregrine(nocache);
  auto other = base;
  other[9] = "99";
  Result d = peregrine(other);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out), jc = nlohmann::json::parse(c.out),
       jd = nlohmann::json::parse(d.out);
  EXPECT_EQ(ja["tokens"], jb["tokens"]);
  EXPECT_EQ(ja["tokens"], jc["tokens"]) << "no-cache mode must produce the same tokens";
  EXPECT_NE(ja["tokens"], jd["tokens"]) << "a different seed should change the sample";
}

TEST(Cli, ConvertThenRunGgufGivesSameTokens) {
  auto dir = scratch_dir("cli-convert");
  for (const char* type : {"f32", "q8_0"}) {
    auto gguf = (dir / (std::string("stories260K-") + type + ".gguf")).string();
    Result conv = peregrine({"convert", stories_bin(), "--tokenizer", stories_tok(), "-o", gguf, "--type", type});
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    Result r = peregrine({"run", gguf, "--temperature", "0", "-n", "32", "--kv-type", "f32", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    if (std::string(type) == "f32")
      EXPECT_EQ(json_ids(j["tokens"]), kGoldenPrefix);
    else
      EXPECT_EQ(json_ids(j["tokens"]).size(), kGoldenPrefix.size());
    Result info = peregrine({"info", gguf});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("architecture:     llama"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("GQA, 8 query heads, 4 KV heads, head dim 8"), std::string::npos) << info.out;
  }
}

TEST(Cli, Tokenize) {
  Result r = peregrine({"tokenize", stories_bin(), "--tokenizer", stories_tok(), "-p", "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // BOS, then the ids the greedy golden output starts with (same text).
  EXPECT_EQ(r.out, "1 403 407 261 378\n");
  Result nobos =
      peregrine({"tokenize", stories_bin(), "--tokenizer", stories_tok(), "-p", "Once upon a time", "--no-bos"});
  EXPECT_EQ(nobos.out, "403 407 261 378\n");
  // -f reads the bytes exactly: a trailing newline is a token.
  auto dir = scratch_dir("cli-tokenize");
  std::ofstream(dir / "in.txt", std::ios::binary) << "Once upon a time\n";
  Result f =
      peregrine({"tokenize", stories_bin(), "--tokenizer", stories_tok(), "-f", (dir / "in.txt").string(), "--no-bos"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out.rfind("403 407 261 378 ", 0), 0u) << f.out;
  EXPECT_NE(f.out, nobos.out);
}

TEST(Cli, KvCalcSideBySide) {
  Result r = peregrine({"kv-calc", "--layers", "22", "--heads", "32", "--kv-heads", "4", "--head-dim", "64",
                        "--context", "2048", "--batch", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // TinyLlama: 2*22*4*64*2 B = 22528 B/token with GQA; MHA is 8x that.
  EXPECT_NE(r.out.find("22.00 KiB"), std::string::npos) << r.out;   // GQA per token
  EXPECT_NE(r.out.find("176.00 KiB"), std::string::npos) << r.out;  // MHA per token
  EXPECT_NE(r.out.find("44.00 MiB"), std::string::npos) << r.out;   // GQA per sequence
  EXPECT_NE(r.out.find("352.00 MiB"), std::string::npos) << r.out;  // GQA whole batch
  Result model = peregrine({"kv-calc", stories_bin(), "--tokenizer", stories_tok(), "--batch", "4"});
  ASSERT_EQ(model.exit_code, 0) << model.err;
  EXPECT_NE(model.out.find("GQA (4 KV heads)*"), std::string::npos) << model.out;
  Result bad =
      peregrine({"kv-calc", "--layers", "2", "--heads", "6", "--kv-heads", "4", "--head-dim", "8", "--context", "8"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("must divide"), std::string::npos);
}

TEST(Cli, SynthWritesALoadableModel) {
  auto dir = scratch_dir("cli-synth");
  auto path = (dir / "s15m.gguf").string();
  Result s = peregrine({"synth", "--preset", "stories15m", "--type", "q8_0", "--seed", "3", "-o", path});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  Result info = peregrine({"info", path});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("layers:           6"), std::string::npos) << info.out;
  Result r = peregrine({"run", path, "-p", "hello", "-n", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 8u);
}

// Every quantized type and mix, end to end: synth writes it, info names its tensor types, run
// generates (through the integer kernels of each type); an unknown --type names the choices.
TEST(Cli, SynthAndRunEveryTypeAndMix) {
  auto dir = scratch_dir("cli-types");
  const std::pair<const char*, const char*> cases[] = {
      {"q4_1", "q4_1 x"},    {"q5_0", "q5_0 x"},   {"q5_1", "q5_1 x"},     {"iq4_nl", "iq4_nl x"},
      {"q3_k", "q3_K x"},    {"q5_k", "q5_K x"},   {"iq4_xs", "iq4_xs x"}, {"q2_k", "q2_K x"},
      {"q3_k_m", "q5_K x2"}, {"q4_k_m", "q6_K x"}, {"q5_k_m", "q5_K x"}};
  for (auto [type, shown] : cases) {
    const auto path = (dir / (std::string(type) + ".gguf")).string();
    Result s = peregrine({"synth", "--preset", "tiny-llama", "--type", type, "--seed", "3", "-o", path});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    Result info = peregrine({"info", path});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find(shown), std::string::npos) << type << ": " << info.out;
    Result r = peregrine({"run", path, "-p", "hello", "-n", "4", "--temperature", "0", "--json"});
    ASSERT_EQ(r.exit_code, 0) << type << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 4u) << type;
  }
  Result bad = peregrine(
      {"convert", stories_bin(), "--tokenizer", stories_tok(), "-o", (dir / "x.gguf").string(), "--type", "q4_k_x"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown --type 'q4_k_x' (choose f32,"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("q4_k_m"), std::string::npos) << bad.err;
}

TEST(Cli, EmbeddedDemoModelIsTheDefault) {
  // models/demo-target.gguf is linked into the binary: no model argument needed.
  ASSERT_TRUE(std::filesystem::exists(source_dir() / "models" / "demo-target.gguf"));
  Result r = peregrine({"run", "-p", "It is a truth universally", "-n", "8", "--temperature", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 8u);
  Result info = peregrine({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("<embedded demo model>"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("architecture:     llama"), std::string::npos) << info.out;
}

TEST(Cli, BadInputGivesClearErrors) {
  auto dir = scratch_dir("cli-bad");
  Result missing = peregrine({"run", (dir / "nope.gguf").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("not found"), std::string::npos) << missing.err;

  std::ofstream(dir / "junk.gguf", std::ios::binary) << "GGUF\x03\x00\x00\x00garbage";
  Result junk = peregrine({"info", (dir / "junk.gguf").string()});
  EXPECT_EQ(junk.exit_code, 1);
  EXPECT_NE(junk.err.find("junk.gguf"), std::string::npos) << junk.err;

  Result flag = peregrine({"run", stories_bin(), "--tokenizer", stories_tok(), "--top-p", "abc"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("--top-p"), std::string::npos) << flag.err;

  Result unknown = peregrine({"run", stories_bin(), "--bogus"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("--bogus"), std::string::npos) << unknown.err;

  Result no_tok = peregrine({"run", stories_bin()});
  EXPECT_NE(no_tok.exit_code, 0);
  EXPECT_FALSE(no_tok.err.empty());

  Result preset = peregrine({"synth", "--preset", "nope", "-o", (dir / "x.gguf").string()});
  EXPECT_EQ(preset.exit_code, 2);
  EXPECT_NE(preset.err.find("stories15m"), std::string::npos) << preset.err;
}

}  // namespace
}  // namespace peregrine::test
