// The real `peregrine` binary under mpirun, as a user launches it: layouts give one process's
// tokens, launch mistakes are one clear error from rank 0, and a rank that dies or hangs ends the
// job with a report in bounded time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_runner.h"
#include "common/test_paths.h"

namespace peregrine::test {
namespace {

std::string stories_bin() { return shared_file("models/stories260K/stories260K.bin").string(); }
std::string stories_tok() { return shared_file("models/stories260K/tok512.bin").string(); }

// mpirun, allowed to run as root (CI containers run as root) and to put more processes than cores.
std::string mpirun_command(int np) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + std::string(PEREGRINE_MPIRUN) +
         " --oversubscribe --bind-to none -np " + std::to_string(np);
}

// `mpirun -np N peregrine ARGS...` with stdout and stderr captured; `env` prefixes the command.
Result mpirun(int np, const std::vector<std::string>& args, const std::string& env = "") {
  static int counter = 0;
  const auto dir = binary_dir() / "test-scratch" / "mpi-cli";
  std::filesystem::create_directories(dir);
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const auto out = dir / ("out" + tag), err = dir / ("err" + tag);
  std::string cmd = env + " timeout -k 5 120 env " + mpirun_command(np) + " " + quote((binary_dir() / "peregrine").string());
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out.string()) + " 2>" + quote(err.string()) + " </dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, slurp(out), slurp(err)};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<int> greedy_ids(const Result& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out)["tokens"].get<std::vector<int>>();
}

TEST(MpiCli, EveryLayoutGivesOneProcesssGreedyTokens) {
  const std::vector<std::string> run = {"run", stories_bin(), "--tokenizer", stories_tok(), "-p", "Once upon a time",
                                        "-n", "48", "--temp", "0", "--json", "-t", "1"};
  const std::vector<int> want = greedy_ids(peregrine(run));
  ASSERT_EQ(want.size(), 48u);
  for (const auto& [np, layout] : std::vector<std::pair<int, std::vector<std::string>>>{
           {2, {"--tp", "2"}}, {2, {"--pp", "2"}}, {4, {"--tp", "2", "--pp", "2"}}, {2, {"--disaggregate", "1:1"}},
           {3, {"--disaggregate", "1:2"}}}) {
    std::vector<std::string> args = run;
    args.insert(args.end(), layout.begin(), layout.end());
    const Result r = mpirun(np, args);
    EXPECT_EQ(greedy_ids(r), want) << layout[0] << " " << layout[1];
    EXPECT_EQ(count(r.out, "\"tokens\""), 1u) << "only rank 0 prints";
  }
}

TEST(MpiCli, LaunchMistakesAreOneClearErrorFromRankZero) {
  const std::vector<std::string> run = {"run", stories_bin(), "--tokenizer", stories_tok(), "-n", "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // A layout without mpirun.
  Result r = peregrine(with({"--tp", "2"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("launch it with mpirun -np 2"), std::string::npos) << r.err;
  // mpirun's process count and the layout disagree.
  r = mpirun(2, run);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "launched as 2 processes"), 1u) << r.err;
  r = mpirun(3, with({"--tp", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "needs 2"), 1u) << r.err;
  // A model that cannot be cut that way: stories260K has 8 heads.
  r = mpirun(3, with({"--tp", "3"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "8 attention heads do not divide by 3"), 1u) << r.err;
  // A decode pool that cannot be cut that way: the same clear error, once.
  r = mpirun(4, with({"--disaggregate", "1:3"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "8 attention heads do not divide by 3"), 1u) << r.err;
  r = mpirun(2, with({"--pp", "2", "--spec", "heads"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "--spec heads needs the whole model"), 1u) << r.err;
}

// Expert parallelism from the command line: a mixture of experts runs with its experts spread over
// two ranks (the tokens equal one process's in mpi_engine_test's exact arithmetic; here the launch,
// the flags' mistakes and bench's traffic report).
TEST(MpiCli, ExpertParallelismRunsAndItsMistakesAreClearErrors) {
  const auto dir = binary_dir() / "test-scratch" / "mpi-cli";
  std::filesystem::create_directories(dir);
  const std::string moe = (dir / ("tiny-mixtral-" + std::to_string(::getpid()) + ".gguf")).string();
  ASSERT_EQ(peregrine({"synth", "--preset", "tiny-mixtral", "--type", "q8_0", "-o", moe}).exit_code, 0);
  const std::vector<std::string> run = {"run", moe, "-p", "hello", "-n", "12", "--temp", "0", "--json", "-t", "1"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Result r = mpirun(2, with(run, {"--tp", "2", "--ep"}));
  EXPECT_EQ(greedy_ids(r).size(), 12u) << r.err;
  r = mpirun(2, with(run, {"--tp", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "spread them over the ranks with --ep"), 1u) << r.err;
  r = mpirun(2, with(run, {"--pp", "2", "--ep"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "give --tp 2 or more"), 1u) << r.err;
  r = mpirun(2, with(run, {"--disaggregate", "1:1", "--ep"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "give a pool of 2 or more"), 1u) << r.err;
  r = mpirun(2, {"run", stories_bin(), "--tokenizer", stories_tok(), "-n", "4", "--tp", "2", "--ep"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "needs a mixture-of-experts model"), 1u) << r.err;
  // bench reports the traffic per token: one attention all-reduce and the expert exchange per layer.
  r = mpirun(2, {"bench", moe, "-p", "8", "-n", "8", "-r", "1", "-t", "1", "--json", "--tp", "2", "--ep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto comm = nlohmann::json::parse(r.out)["tg"]["comm"];
  EXPECT_GT(comm["bytes_sent_per_token"].get<double>(), 0) << comm.dump();
  std::filesystem::remove(moe);
}

// The guarded context (backend/guarded_context.h: memory the host cannot read outside the
// context's calls) on the layouts that move activations between processes: tensor parallelism's
// all-reduce, pipeline stages' hidden states and expert parallelism's exchange. It runs the scalar
// kernels, so the CPU context on the scalar path (PEREGRINE_ISA) gives the reference tokens.
TEST(MpiCli, TheGuardedContextGivesTheCpuTokensOnTensorPipelineAndExpertLayouts) {
  ::setenv("PEREGRINE_ISA", "scalar", 1);  // for the CPU runs below (children inherit it)
  const std::vector<std::string> run = {"run", stories_bin(), "--tokenizer", stories_tok(), "-p", "Once upon a time",
                                        "-n", "16", "--temp", "0", "--json", "-t", "1"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::vector<int> want = greedy_ids(peregrine(run));
  ASSERT_EQ(want.size(), 16u);
  EXPECT_EQ(greedy_ids(mpirun(2, with(run, {"--tp", "2", "--backend", "guarded"}))), want) << "--tp 2";
  EXPECT_EQ(greedy_ids(mpirun(2, with(run, {"--pp", "2", "--backend", "guarded"}))), want) << "--pp 2";
  const auto dir = binary_dir() / "test-scratch" / "mpi-cli";
  std::filesystem::create_directories(dir);
  const std::string moe = (dir / ("guarded-mixtral-" + std::to_string(::getpid()) + ".gguf")).string();
  ASSERT_EQ(peregrine({"synth", "--preset", "tiny-mixtral", "--type", "q8_0", "-o", moe}).exit_code, 0);
  const std::vector<std::string> ep = {"run", moe, "-p", "hello", "-n", "8", "--temp", "0", "--json", "-t", "1",
                                       "--tp", "2", "--ep"};
  const std::vector<int> ep_want = greedy_ids(mpirun(2, ep));
  ASSERT_EQ(ep_want.size(), 8u);
  EXPECT_EQ(greedy_ids(mpirun(2, with(ep, {"--backend", "guarded"}))), ep_want) << "--tp 2 --ep";
  std::filesystem::remove(moe);
  ::unsetenv("PEREGRINE_ISA");
}

TEST(MpiCli, AMissingMpiRuntimeIsAClearError) {
  const std::vector<std::string> run = {"run", stories_bin(), "--tokenizer", stories_tok(), "-n", "4", "--tp", "2"};
  Result r = mpirun(2, run, "PEREGRINE_MPI_PLUGIN=/nonexistent/libperegrine_mpi.so");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("built without MPI"), std::string::npos) << r.err;
  // A plugin the loader cannot load (the real one's libmpi missing looks the same to dlopen).
  r = mpirun(2, run, "PEREGRINE_MPI_PLUGIN=" + stories_tok());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the MPI runtime could not be loaded"), std::string::npos) << r.err;
}

// Starts a long tensor-parallel run (every token recomputes the whole prefix), with each rank's pid
// written to a file, and returns mpirun's pid.
struct LongRun {
  pid_t mpirun = -1;
  std::filesystem::path dir, out, err;
};

LongRun start_long_run(const std::string& name) {
  LongRun run;
  run.dir = scratch_dir("mpi-cli-" + name + "-" + std::to_string(::getpid()));
  run.out = run.dir / "out";
  run.err = run.dir / "err";
  const std::string peregrine_bin = (binary_dir() / "peregrine").string();
  const std::string inner = "echo $$ > " + run.dir.string() + "/pid.$OMPI_COMM_WORLD_RANK; exec " + peregrine_bin +
                            " run " + stories_bin() + " --tokenizer " + stories_tok() +
                            " -n 500 --ignore-eos --no-kv-cache -t 1 --tp 2 --rank-timeout 3";
  const std::string cmd = "exec timeout -k 5 100 env " + mpirun_command(2) + " sh -c " + quote(inner) + " >" +
                          quote(run.out.string()) + " 2>" + quote(run.err.string()) + " </dev/null";
  run.mpirun = fork();
  if (run.mpirun == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return run;
}

pid_t wait_for_rank_pid(const LongRun& run, int rank) {
  const auto file = run.dir / ("pid." + std::to_string(rank));
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(file);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

// Waits for mpirun; returns its exit code and the seconds it took after `since`.
std::pair<int, double> wait_exit(pid_t pid, std::chrono::steady_clock::time_point since) {
  int status = 0;
  waitpid(pid, &status, 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s};
}

TEST(MpiCli, AKilledRankEndsTheJobWithAReportFromRankZero) {
  LongRun run = start_long_run("kill");
  const pid_t rank1 = wait_for_rank_pid(run, 1);
  ASSERT_GT(rank1, 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // well into the run
  const auto t0 = std::chrono::steady_clock::now();
  kill(rank1, SIGKILL);
  const auto [code, seconds] = wait_exit(run.mpirun, t0);
  const std::string err = slurp(run.err);
  EXPECT_NE(code, 0) << err;
  EXPECT_NE(code, 124) << "timed out instead of ending: " << err;
  EXPECT_LT(seconds, 15) << err;
  EXPECT_NE(err.find("peregrine: rank 0: a process of the layout failed"), std::string::npos) << err;
}

TEST(MpiCli, AHungRankIsNoticedWithinTheRankTimeout) {
  LongRun run = start_long_run("hang");
  const pid_t rank1 = wait_for_rank_pid(run, 1);
  ASSERT_GT(rank1, 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto t0 = std::chrono::steady_clock::now();
  kill(rank1, SIGSTOP);  // alive but silent: mpirun cannot tell, rank 0's deadline must
  const auto [code, seconds] = wait_exit(run.mpirun, t0);
  kill(rank1, SIGKILL);  // in case it outlived the job
  const std::string err = slurp(run.err);
  EXPECT_NE(code, 0) << err;
  EXPECT_NE(code, 124) << "timed out instead of ending: " << err;
  EXPECT_LT(seconds, 15) << err;  // --rank-timeout 3 without a heartbeat, then MPI_Abort
  EXPECT_NE(err.find("rank 1 (at "), std::string::npos) << err;
  EXPECT_NE(err.find("(limit 3.0 s): dead or hung"), std::string::npos) << err;
}

TEST(MpiCli, PlanReproducesTheChaptersFigures) {
  Result r = peregrine({"plan", "--params", "8e9", "--dtype", "f16", "--device", "h100", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["layout"]["decode_tokens_per_s"].get<double>(), 209.4, 0.1);  // 3.35 TB/s / 16 GB
  r = peregrine({"plan", "--params", "70B", "--dtype", "f16", "--device", "h100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("140.00 GB of 72.00 GB usable  -> DOES NOT FIT"), std::string::npos) << r.out;
  r = peregrine({"plan", "--params", "8e9", "--device", "tpu"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown --device 'tpu'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace peregrine::test
