// Speculative decoding from the command line: every proposer gives the tokens plain decoding
// gives (greedy and seeded sampling), `run --json` reports the counts, and bad flags or files
// get a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/test_paths.h"

namespace peregrine::test {
namespace {

nlohmann::json run_json(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", "-p", "It is a truth universally", "-n", "48", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  Result r = peregrine(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(CliSpec, EveryProposerGivesPlainDecodingsTokens) {
  for (const std::vector<std::string>& sampling :
       {std::vector<std::string>{"--temperature", "0"}, std::vector<std::string>{"--temperature", "0.9", "--seed", "5"}}) {
    const auto plain = run_json(sampling);
    EXPECT_FALSE(plain.contains("spec"));
    for (const std::string proposer : {"ngram", "draft", "heads"}) {
      for (const std::string k : {"1", "3", "8"}) {
        auto args = sampling;
        args.insert(args.end(), {"--spec", proposer, "--spec-tokens", k});
        const auto got = run_json(args);
        EXPECT_EQ(got["tokens"], plain["tokens"]) << proposer << " k " << k << " " << sampling[1];
        EXPECT_EQ(got["text"], plain["text"]);
        const auto& s = got["spec"];
        EXPECT_EQ(s["proposer"], proposer);
        EXPECT_EQ(s["k"], std::stoi(k));
        EXPECT_LE(s["accepted"].get<int64_t>(), s["proposed"].get<int64_t>());
        EXPECT_GE(s["tokens_per_target_pass"].get<double>(), 1.0);
        EXPECT_EQ(s["plain_target_passes"], 48);
        if (proposer != "ngram") {
          EXPECT_GT(s["draft_passes"].get<int64_t>(), 0);
        }
      }
    }
  }
  // Greedy text of the demo model repeats itself: prompt lookup must find it.
  const auto ngram = run_json({"--temperature", "0", "--spec", "ngram"});
  EXPECT_GT(ngram["spec"]["acceptance_rate"].get<double>(), 0.5);
  EXPECT_LT(ngram["spec"]["target_passes"].get<int64_t>(), 30);
}

TEST(CliSpec, BadFlagsAndFilesGetClearErrors) {
  const std::string stories = shared_file("models/stories260K/stories260K.bin").string();
  const std::string tok = shared_file("models/stories260K/tok512.bin").string();
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  };
  const auto dir = scratch_dir("cli_spec");
  const std::string not_a_model = (dir / "notes.txt").string();
  std::ofstream(not_a_model) << "these are not weights\n";
  const std::vector<Case> cases = {
      {{"--spec-tokens", "0", "--spec", "ngram"}, 2, "--spec-tokens"},
      {{"--spec-tokens", "33", "--spec", "ngram"}, 2, "--spec-tokens"},
      {{"--spec", "oracle"}, 2, "expected draft, ngram or heads"},
      {{"--spec", "ngram", "--draft-model", stories}, 2, "--draft-model goes with --spec draft"},
      {{"--draft-model", not_a_model}, 1, "notes.txt"},
      {{"--spec", "heads", "--heads", not_a_model}, 1, "notes.txt"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", "-p", "Hi", "-n", "4"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Result r = peregrine(args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args[0] << " " << c.args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  // A draft of another vocabulary (stories260K's 512 tokens against the demo's 1024): two valid
  // files that do not go together, a usage error.
  const auto converted = (dir / "stories.gguf").string();
  ASSERT_EQ(peregrine({"convert", stories, "--tokenizer", tok, "-o", converted}).exit_code, 0);
  Result r = peregrine({"run", "-p", "Hi", "-n", "4", "--draft-model", converted});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("vocabulary of 512 tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace peregrine::test
