// `peregrine bench`'s bounds: the decode bound counts the K/V a step reads next to the weights,
// and the bandwidth it divides by is the best of the probe (with its spread: best, median, worst
// pass) and of the read rates the run's own decode and prefill reach.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/test_paths.h"

namespace peregrine::test {
namespace {

TEST(CliBench, DecodeBoundCountsTheKvCacheAndShowsTheProbeSpread) {
  const auto dir = scratch_dir("cli-bench");
  const std::string path = (dir / "tiny-llama-q8_0.gguf").string();
  ASSERT_EQ(peregrine({"synth", "--preset", "tiny-llama", "--type", "q8_0", "-o", path}).exit_code, 0);
  const Result r = peregrine({"bench", path, "-t", "2", "-p", "8", "-n", "16", "-r", "1", "-b", "1,4",
                              "--batched-steps", "6", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double best = j["bandwidth_gbps"].get<double>() * 1e9;
  EXPECT_LE(j["bandwidth_worst_gbps"].get<double>(), j["bandwidth_median_gbps"].get<double>());
  EXPECT_LE(j["bandwidth_median_gbps"].get<double>(), j["bandwidth_gbps"].get<double>());
  EXPECT_GE(j["bandwidth_passes"].get<int>(), 10);
  // The bound's bandwidth is the best of the probe and of the read rates the run's own decode and
  // prefill reached (both measured here: one process, no speculation).
  const double probe = j["bandwidth_probe_gbps"].get<double>(), decode = j["bandwidth_decode_gbps"].get<double>(),
               prefill = j["bandwidth_prefill_gbps"].get<double>();
  EXPECT_LE(j["bandwidth_median_gbps"].get<double>(), probe);
  EXPECT_GT(decode, 0);
  EXPECT_GT(prefill, 0);
  EXPECT_DOUBLE_EQ(j["bandwidth_gbps"].get<double>(), std::max({probe, decode, prefill}));
  EXPECT_LE(j["tg"]["pct_of_bound"].get<double>(), 100.0 + 1e-9);
  // tiny-llama: 4 layers, 2 KV heads of 32, an f16 cache: K and V of one position are 1024 bytes;
  // 16 tokens from a one-token prompt attend over 1..16 positions, 8.5 on average.
  EXPECT_DOUBLE_EQ(j["kv_bytes_per_position"].get<double>(), 2 * 4 * 2 * 32 * 2);
  const double kv = j["tg"]["kv_bytes_read_per_token"].get<double>();
  EXPECT_DOUBLE_EQ(kv, 1024 * 8.5);
  const double weights = j["bytes_read_per_token"].get<double>();
  EXPECT_NEAR(j["tg"]["bound_tps"].get<double>(), best / (weights + kv), 1e-9 * best / weights);
  EXPECT_LE(j["tg"]["bound_tps_at_median_bandwidth"].get<double>(), j["tg"]["bound_tps"].get<double>());
  // Four sequences share the weights, not their K/V (6 steps: 3.5 positions each on average).
  const double b4 = j["batched"][1]["bound_tps"].get<double>();
  EXPECT_LE(b4, 4 * best / (weights + 4 * 1024 * 3.5) * (1 + 1e-9));
  EXPECT_LE(b4, j["pp"]["bound_tps"].get<double>() * (1 + 1e-9));

  // --kv-type: the bound counts the cache type's bytes (Q8_0: 34 bytes per 32 values).
  const Result q = peregrine({"bench", path, "-t", "2", "-p", "0", "-n", "4", "-r", "1", "-b", "", "--kv-type", "q8_0",
                              "--json"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const auto jq = nlohmann::json::parse(q.out);
  EXPECT_EQ(jq["kv_type"], "q8_0");
  EXPECT_DOUBLE_EQ(jq["kv_bytes_per_position"].get<double>(), 2 * 4 * 2 * 34);
  EXPECT_EQ(peregrine({"bench", path, "--kv-type", "f8"}).exit_code, 2);
}

// -d N: tg runs decode after N positions (llama-bench's depth), and the bound counts the K/V of
// those positions; the 8- and 4-bit KV types count their own bytes. synth --context gives the
// small shape room for it.
TEST(CliBench, DepthDecodesAfterAPromptAndCountsItsKv) {
  const auto dir = scratch_dir("cli-bench-depth");
  const std::string path = (dir / "tiny-llama-long.gguf").string();
  ASSERT_EQ(peregrine({"synth", "--preset", "tiny-llama", "--type", "q8_0", "--context", "2048", "-o", path}).exit_code,
            0);
  for (const auto& [type, row_bytes] : {std::pair{"q4_0", 18}, std::pair{"fp8_e4m3", 34}, std::pair{"f16", 64}}) {
    const Result r = peregrine({"bench", path, "-t", "2", "-p", "0", "-n", "4", "-r", "1", "-b", "", "-d", "1500",
                                "--kv-type", type, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    // 4 layers x 2 KV heads x (K, V) rows of 32 values.
    EXPECT_DOUBLE_EQ(j["kv_bytes_per_position"].get<double>(), 2 * 4 * 2 * row_bytes) << type;
    EXPECT_EQ(j["tg"]["depth"].get<int>(), 1500);
    // 4 tokens after 1500 positions attend over 1501..1504 positions, 1502.5 on average.
    EXPECT_DOUBLE_EQ(j["tg"]["kv_bytes_read_per_token"].get<double>(), 2 * 4 * 2 * row_bytes * 1502.5) << type;
    EXPECT_GT(j["tg"]["tps_mean"].get<double>(), 0);
  }
  // Past the context the file gives: a clear error, not a crash.
  const Result too_deep = peregrine({"bench", path, "-p", "0", "-n", "4", "-r", "1", "-b", "", "-d", "4000"});
  EXPECT_NE(too_deep.exit_code, 0);
  EXPECT_EQ(peregrine({"synth", "--preset", "tiny-llama", "--context", "0", "-o", path}).exit_code, 2);
}

// The thread pool's figures per decode token: tiny-llama meets its threads 4 times per layer
// (Q/K/V together, wo, gate/up together, down; attention over so short a context stays on the
// calling thread) and once for the output head, every step.
TEST(CliBench, ReportsThePoolCallsPerDecodeToken) {
  const auto dir = scratch_dir("cli-bench-pool");
  const std::string path = (dir / "tiny-llama-q8_0.gguf").string();
  ASSERT_EQ(peregrine({"synth", "--preset", "tiny-llama", "--type", "q8_0", "-o", path}).exit_code, 0);
  const Result r = peregrine({"bench", path, "-t", "2", "-p", "0", "-n", "16", "-r", "2", "-b", "", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto pool = nlohmann::json::parse(r.out)["tg"]["pool"];
  EXPECT_DOUBLE_EQ(pool["dispatches_per_token"].get<double>(), 4 * 4 + 1);
  EXPECT_DOUBLE_EQ(pool["tasks_per_token"].get<double>(), 2 * (4 * 4 + 1));  // one task per thread
  EXPECT_GT(pool["us_per_dispatch"].get<double>(), 0);
  for (const char* share : {"idle_share_in_dispatches", "serial_share_of_decode"}) {
    EXPECT_GE(pool[share].get<double>(), 0) << share;
    EXPECT_LE(pool[share].get<double>(), 1) << share;
  }
  EXPECT_GE(pool["worker_sleeps_per_token"].get<double>(), 0);
}

}  // namespace
}  // namespace peregrine::test
