// `peregrine bench-serve` end to end on stories260K: the JSON report has the fields the issue
// names, for both policies, and the workload's shared prefix shows up as prefix-cache hits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/test_paths.h"

namespace peregrine {
namespace {

struct CommandResult {
  int status;
  std::string out;
};

CommandResult run_bench(const std::string& args) {
  const std::string cmd = (test::binary_dir() / "peregrine").string() + " bench-serve " + args + " 2>/dev/null";
  CommandResult r{-1, ""};
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  r.status = pclose(pipe);
  return r;
}

std::string stories_args() {
  return test::shared_file("models/stories260K/stories260K.bin").string() + " --tokenizer " +
         test::shared_file("models/stories260K/tok512.bin").string();
}

TEST(BenchServe, JsonReportComparesPoliciesOnTheSameWorkload) {
  const CommandResult r = run_bench(stories_args() + " --requests 12 --input-len 40:60 --output-len 4:8 --prefix-share 0.5"
                                     " --max-seqs 4 --kv-cache-memory 1MiB -t 1 --compare-policies --json --seed 3");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* policy : {"continuous", "static"}) {
    ASSERT_TRUE(j.contains(policy)) << policy;
    const nlohmann::json& p = j[policy];
    for (const char* key : {"output_tps", "request_tps", "slot_utilization", "preemptions", "prefix_hit_rate"}) {
      EXPECT_TRUE(p.contains(key)) << policy << "." << key;
    }
    for (const char* key : {"ttft_ms", "tpot_ms"}) {
      for (const char* q : {"p50", "p90", "p99"}) EXPECT_TRUE(p[key].contains(q)) << key << "." << q;
      EXPECT_LE(p[key]["p50"].template get<double>(), p[key]["p99"].get<double>());
    }
    EXPECT_GT(p["output_tps"].get<double>(), 0);
    EXPECT_EQ(p["errors"].get<int>(), 0);
    EXPECT_GT(p["prefix_hit_rate"].get<double>(), 0.1) << policy;  // half of each prompt is shared
    EXPECT_GT(p["slot_utilization"].get<double>(), 0);
    EXPECT_LE(p["slot_utilization"].get<double>(), 1);
  }
  EXPECT_EQ(j["continuous"]["output_tokens"], j["static"]["output_tokens"]);
}

TEST(BenchServe, ConstrainedWorkloadReportsTheGrammarsShare) {
  const auto dir = test::binary_dir() / "bench_serve_grammar";
  std::filesystem::create_directories(dir);
  const auto schema = dir / "schema.json";
  std::ofstream(schema) << R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
                               "b": {"enum": [1, 2, 3]}}, "required": ["a", "b"]})";
  const CommandResult r = run_bench(stories_args() +
                                    " --requests 6 --input-len 8:16 --output-len 40:40 -t 1 --json"
                                    " --json-schema " +
                                    schema.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out)["continuous"];
  ASSERT_TRUE(j.contains("grammar")) << r.out;
  EXPECT_GT(j["grammar"]["masked_rows"].get<int64_t>(), 0);
  EXPECT_GT(j["grammar"]["ms_per_step"].get<double>(), 0);
  EXPECT_LT(j["grammar"]["share_of_time"].get<double>(), 1);
  // Every request ends once its object is complete, well before 40 tokens.
  EXPECT_LT(j["output_tokens"].get<int64_t>(), 6 * 40);
  const auto bad = dir / "bad.json";
  std::ofstream(bad) << R"({"type": "integer", "minimum": 1})";
  EXPECT_NE(run_bench(stories_args() + " --json-schema " + bad.string()).status, 0);
  EXPECT_NE(run_bench(stories_args() + " --json-schema " + schema.string() + " --grammar " + schema.string()).status,
            0);
}

// --output-dist exponential draws many short and few long outputs in [MIN, MAX]; the report has
// each request's finish time (mean, percentiles) and the share of compute-bound steps.
TEST(BenchServe, ExponentialOutputsFinishTimesAndComputeBoundShare) {
  const std::string common = stories_args() + " --requests 24 --input-len 20:40 --output-len 2:60 --max-seqs 4"
                                               " --kv-cache-memory 1MiB -t 1 --json --seed 5";
  const CommandResult u = run_bench(common + " --output-dist uniform");
  const CommandResult e = run_bench(common + " --output-dist exponential");
  ASSERT_EQ(u.status, 0) << u.out;
  ASSERT_EQ(e.status, 0) << e.out;
  const auto ju = nlohmann::json::parse(u.out)["continuous"], je = nlohmann::json::parse(e.out)["continuous"];
  // Exponential with mean 29 extra tokens cut at 58 averages ~22 extra; uniform ~29: fewer tokens.
  EXPECT_LT(je["output_tokens"].get<int>(), ju["output_tokens"].get<int>());
  for (const auto& j : {ju, je}) {
    const auto& f = j["finish_ms"];
    EXPECT_GT(f["mean"].get<double>(), 0);
    EXPECT_LE(f["p50"].get<double>(), f["p90"].get<double>());
    EXPECT_GE(f["p50"].get<double>(), j["ttft_ms"]["p50"].get<double>());
    ASSERT_TRUE(j.contains("compute_bound_step_share"));
    if (!j["compute_bound_step_share"].is_null()) {
      EXPECT_GE(j["compute_bound_step_share"].get<double>(), 0);
      EXPECT_LE(j["compute_bound_step_share"].get<double>(), 1);
    }
  }
  const CommandResult bad = run_bench(common + " --output-dist zipf");
  EXPECT_NE(bad.status, 0);
}

TEST(BenchServe, RejectsBadArguments) {
  EXPECT_NE(run_bench(stories_args() + " --rate abc").status, 0);
  EXPECT_NE(run_bench(stories_args() + " --input-len 9:3").status, 0);
  EXPECT_NE(run_bench(stories_args() + " --policy fastest").status, 0);
  EXPECT_NE(run_bench(stories_args() + " --kv-cache-memory 12parsecs").status, 0);
  EXPECT_NE(run_bench(stories_args() + " --input-len 400:500 --output-len 200:200").status, 0);  // > context 512
  EXPECT_NE(run_bench(stories_args() + " --kv-cache-memory 150%").status, 0);
  EXPECT_NE(run_bench(stories_args() + " --kv-cache-memory 0").status, 0);
  EXPECT_NE(run_bench(stories_args() + " --kv-type q4").status, 0);  // no such type (q4_0 is)
}

// --step-log: one CSV line per engine step, its rows adding up to the prompt and output tokens
// computed, each line's prediction and budget present once the step-time model is fitted.
TEST(BenchServe, StepLogHasEveryStep) {
  const auto log =
      std::filesystem::temp_directory_path() / ("peregrine_step_log_" + std::to_string(::getpid()) + ".csv");
  const CommandResult r = run_bench(stories_args() +
                                    " --requests 6 --rate 50 --input-len 40:120 --output-len 16:24"
                                    " --max-seqs 4 --kv-cache-memory 1MiB -t 1 --json --seed 3 --step-log " +
                                    log.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out)["continuous"];
  std::ifstream in(log);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line,
            "policy,step,end_s,decode_rows,prefill_tokens,context_tokens,attention_pairs,predicted_ms,budget_ms,ms");
  int64_t steps = 0, rows = 0, predicted = 0;
  while (std::getline(in, line)) {
    std::array<double, 9> v{};
    ASSERT_EQ(std::sscanf(line.c_str(), "continuous,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &v[0], &v[1], &v[2], &v[3],
                          &v[4], &v[5], &v[6], &v[7], &v[8]),
              9)
        << line;
    EXPECT_EQ(v[0], static_cast<double>(++steps));
    EXPECT_GE(v[5], v[2] + v[3]) << "each row attends to at least itself";
    rows += static_cast<int64_t>(v[2] + v[3]);
    predicted += v[6] > 0 ? 1 : 0;
  }
  std::filesystem::remove(log);
  EXPECT_EQ(steps, j["steps"].get<int64_t>());
  EXPECT_GT(rows, j["output_tokens"].get<int64_t>());
  EXPECT_GT(predicted, 0) << "the step-time model never predicted a step";
  EXPECT_NE(run_bench(stories_args() + " --url http://127.0.0.1:1 --step-log " + log.string()).status, 0);
}

TEST(BenchServe, KvCacheMemoryAsAShareOfAvailableMemory) {
  const CommandResult r = run_bench(stories_args() + " --requests 4 --input-len 8:16 --output-len 2:4"
                                     " --kv-cache-memory 0.1% -t 1 --json --seed 3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["continuous"]["errors"].get<int>(), 0);
}

}  // namespace
}  // namespace peregrine
