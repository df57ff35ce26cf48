// Runs under mpirun (tests/dist/CMakeLists.txt registers the layouts): every rank loads its part of
// a model through a DistSession; rank 0 runs these tests against the engine on the layout's
// runner and against the whole model in its own process, while the other ranks serve its steps.
//   mpi_engine_test --model stories|tiny-llama|tiny-llama3|tiny-qwen2|tiny-mixtral|...
//                   (--tp T --pp P [--ep] | --disaggregate P:D)
//                   [--f32 | --exact]
// --f32: exact f32 activations; --exact: those and an f32 KV cache (see GreedyTokensMatchOneProcess).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "backend/cpu_context.h"
#include "common/test_paths.h"
#include "dist/session.h"
#include "engine/engine_core.h"
#include "format/llama2c.h"
#include "synth/synthetic.h"

namespace peregrine {
namespace {

struct Setup {
  std::string model = "stories";
  dist::Layout layout;
  Activations act = Activations::Q8;
  KvType kv = KvType::F16;
};
Setup g_setup;
dist::DistSession* g_session = nullptr;

ModelFile open_model(int rank) {
  if (g_setup.model == "stories") {
    return read_llama2c(test::shared_file("models/stories260K/stories260K.bin"),
                        test::shared_file("models/stories260K/tok512.bin"));
  }
  const auto spec = synthetic_preset(g_setup.model);
  if (!spec) throw std::runtime_error("no preset " + g_setup.model);
  // One file per rank and launch (mpirun's pid): ranks write at the same time.
  const auto dir = test::binary_dir() / "test-scratch" / "dist";
  std::filesystem::create_directories(dir);
  const auto path = dir / (g_setup.model + "-r" + std::to_string(rank) + "-" + std::to_string(::getppid()) + ".gguf");
  write_synthetic_gguf(*spec, TensorType::Q8_0, 3, path);
  ModelFile f = open_model_file(path);
  std::filesystem::remove(path);  // mapped: the pages stay until unmapped
  return f;
}

// The whole model in rank 0's process: the single-process reference.
Model& whole_model() {
  static Model m(open_model(0), std::make_shared<CpuContext>(1, g_setup.act));
  return m;
}

struct Outcome {
  std::vector<TokenId> tokens;
  RequestFinish finish = RequestFinish::None;
  std::string error;
  int n_finish_events = 0;
};
using Outcomes = std::map<RequestId, Outcome>;

void record(Outcomes& out, const RequestEvent& ev) {
  Outcome& o = out[ev.id];
  for (const GeneratedToken& t : ev.tokens) o.tokens.push_back(t.token);
  if (ev.finish != RequestFinish::None) {
    o.finish = ev.finish;
    o.error = ev.error;
    ++o.n_finish_events;
  }
}

Outcome run_alone(const Request& r, int64_t kv_blocks) {
  EngineConfig cfg;
  cfg.kv_blocks = kv_blocks;
  cfg.kv_type = g_setup.kv;
  cfg.prefix_caching = false;
  EngineCore core(whole_model(), nullptr, cfg);
  Outcomes out;
  const RequestId id = core.add_request(r);
  while (core.has_work()) {
    for (const auto& ev : core.step()) record(out, ev);
  }
  return out[id];
}

int64_t vocab() { return whole_model().config().n_vocab; }

// Tensor parallelism adds each slice's partial sums after wo and w_down, an order of addition one
// process never uses, so hidden states differ in their last bits. With exact f32 arithmetic that
// stays ~1e-6 of the logits; with 8-bit activations and an f16 cache, every re-quantization of a
// slightly different value can move one step, and a random synthetic model's logits then differ
// by ~1% (measured: up to 0.05 on logits of 3.5 after 30 positions, tiny-llama q8_0), enough to
// flip its near-ties. The trained stories model and --exact runs give the same tokens.
TEST(Distributed, GreedyTokensMatchOneProcess) {
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.prompt = {1};
    for (int k = 0; k < 3 + 11 * i; ++k) r.prompt.push_back(static_cast<TokenId>((37 * k + 11 * i + 3) % vocab()));
    r.max_tokens = 24;
    r.sampling.temperature = 0;
    requests.push_back(r);
  }
  EngineConfig cfg;
  cfg.kv_blocks = 64;
  cfg.kv_type = g_setup.kv;
  EngineCore core(g_session->runner(), nullptr, cfg);
  Outcomes got;
  std::vector<RequestId> ids;
  for (const Request& r : requests) ids.push_back(core.add_request(r));
  while (core.has_work()) {
    for (const auto& ev : core.step()) record(got, ev);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Outcome want = run_alone(requests[i], 64);
    EXPECT_EQ(got[ids[i]].tokens, want.tokens) << "request " << i;
    EXPECT_EQ(want.tokens.size(), 24u);
  }
  // P stages keep P micro-batches in flight (4 requests: two steps of two sequences each).
  EXPECT_EQ(core.stats().max_steps_in_flight, g_setup.layout.pp);
}

// With exact f32 activations the layout's logits differ from one process's only by the order in
// which the slices' partial sums are added (tensor parallelism) or not at all (pipeline stages).
TEST(Distributed, LogitsMatchOneProcessUpToTheOrderOfTheSums) {
  ASSERT_EQ(g_setup.act, Activations::F32) << "run with --f32";
  Batch b;
  for (int i = 0; i < 9; ++i) b.add(static_cast<TokenId>((31 * i + 3) % vocab()), i, 0, true);
  for (int i = 0; i < 5; ++i) b.add(static_cast<TokenId>((17 * i + 9) % vocab()), i, 1, i == 4);
  KvCache kv_whole = whole_model().make_kv_cache(KvType::F32, 8, 4);
  ASSERT_TRUE(kv_whole.pool().reserve(0, 16) && kv_whole.pool().reserve(1, 16));
  ModelRunner& runner = g_session->runner();
  KvCache kv(runner.allocate_kv({runner.kv_shape(), KvType::F32, 8, 4}));
  runner.bind_cache(kv);
  ASSERT_TRUE(kv.pool().reserve(0, 16) && kv.pool().reserve(1, 16));
  // A prompt step, then a decode step that attends over the cached prompt.
  Batch decode;
  decode.add(7, 9, 0, true);
  decode.add(8, 5, 1, true);
  std::vector<float> want, got;
  for (const Batch& step : {b, decode}) {
    std::vector<float> w, g;
    whole_model().forward(step, kv_whole, w);
    runner.forward(step, kv, g);
    want.insert(want.end(), w.begin(), w.end());
    got.insert(got.end(), g.begin(), g.end());
  }
  runner.unbind_cache(kv);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  const dist::Layout& l = g_setup.layout;
  const bool tensor_split = l.disaggregated() ? l.prefill_ranks > 1 || l.decode_ranks > 1 : l.tp > 1;
  if (!tensor_split) {
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size())) << "stages alone add nothing";
  }
  EXPECT_LT(worst, 1e-4 * scale) << "worst " << worst << " of logits up to " << scale;
}

// The engine stress scenario on the layout: arrivals, cancellations, priorities, prefix hits and
// preemption under a tight cache. Every request ends once with the tokens it gets alone in one
// process; every few steps every rank's KV bookkeeping equals rank 0's; at the end every block is
// free on every rank.
TEST(Distributed, StressUnderTightMemoryKeepsEveryRanksBlocksInStep) {
  std::mt19937 rng(11);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int hi = static_cast<int>(vocab()) - 1;
  std::vector<std::vector<TokenId>> prefixes(3);
  for (auto& p : prefixes) {
    p.push_back(1);
    for (int i = 0, n = uni(10, 40); i < n; ++i) p.push_back(uni(3, hi));
  }
  std::vector<Request> requests;
  for (int i = 0; i < 80; ++i) {
    Request r;
    r.prompt = uni(0, 1) ? prefixes[static_cast<size_t>(uni(0, 2))] : std::vector<TokenId>{1};
    for (int k = 0, n = uni(0, 30); k < n; ++k) r.prompt.push_back(uni(3, hi));
    r.max_tokens = uni(1, 16);
    r.sampling.temperature = uni(0, 1) ? 0.f : 0.8f;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.priority = uni(0, 5) == 0 ? 1 : 0;
    requests.push_back(std::move(r));
  }
  EngineConfig cfg;
  cfg.kv_blocks = 9;  // 144 token slots: a request of up to 87 tokens at a time, others preempted
  cfg.kv_type = g_setup.kv;
  cfg.scheduler.max_batched_tokens = 48;
  cfg.scheduler.max_seqs = 6;
  auto& runner = g_session->runner();
  EngineCore core(runner, nullptr, cfg);
  Outcomes got;
  std::vector<RequestId> ids;
  std::set<RequestId> cancelled;
  size_t next = 0;
  for (int step = 0; step < 100000 && (next < requests.size() || core.has_work()); ++step) {
    for (int k = uni(0, 3); k > 0 && next < requests.size(); --k) ids.push_back(core.add_request(requests[next++]));
    if (!ids.empty() && uni(0, 30) == 0) {
      const RequestId victim = ids[static_cast<size_t>(uni(0, static_cast<int>(ids.size()) - 1))];
      if (core.cancel(victim)) cancelled.insert(victim);
    }
    for (const auto& ev : core.step()) record(got, ev);
    if (step % 25 == 0) {
      ASSERT_EQ(runner.check_mirrors(core.kv()), std::vector<int>{}) << "step " << step;
    }
  }
  ASSERT_EQ(ids.size(), requests.size());
  int checked = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome& o = got[ids[i]];
    ASSERT_EQ(o.n_finish_events, 1) << "request " << i;
    const Outcome ref = run_alone(requests[i], 9);
    if (cancelled.count(ids[i])) {
      ASSERT_LE(o.tokens.size(), ref.tokens.size());
      EXPECT_TRUE(std::equal(o.tokens.begin(), o.tokens.end(), ref.tokens.begin())) << "request " << i;
    } else {
      EXPECT_EQ(o.tokens, ref.tokens) << "request " << i << " " << o.error;
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
  const EngineStats st = core.stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(st.prefix_hit_tokens, 0);
  // Disaggregated: the decode pool kept stepping while prompt steps ran in the prefill pool.
  if (g_setup.layout.disaggregated()) {
    EXPECT_GT(st.steps_beside_prefill, 0);
  }
  EXPECT_EQ(st.kv_blocks_used, 0);
  core.block_manager().clear_prefix_cache();
  EXPECT_EQ(core.kv().pool().n_free_blocks(), cfg.kv_blocks);
  EXPECT_EQ(runner.check_mirrors(core.kv()), std::vector<int>{}) << "a rank's blocks differ from rank 0's";
}

// Disaggregated prefill/decode with the second transfer damaged on the way (the launch sets
// PEREGRINE_TEST_DAMAGE_KV_TRANSFER=2): that request ends with an error after its first token (the
// one its prefill sampled), never decoding from bad K/V; every other request gets its tokens; the
// blocks come back and both ranks' bookkeeping agrees.
TEST(Distributed, ADamagedKvTransferEndsOnlyItsRequest) {
  if (!g_setup.layout.disaggregated()) GTEST_SKIP() << "a disaggregated layout's test";
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.prompt = {1};
    for (int k = 0; k < 5 + 7 * i; ++k) r.prompt.push_back(static_cast<TokenId>((29 * k + 13 * i + 5) % vocab()));
    r.max_tokens = 8;
    r.sampling.temperature = 0;
    requests.push_back(r);
  }
  EngineConfig cfg;
  cfg.kv_blocks = 32;
  cfg.kv_type = g_setup.kv;
  auto& runner = g_session->runner();
  EngineCore core(runner, nullptr, cfg);
  Outcomes got;
  std::vector<RequestId> ids;
  std::vector<std::string> errors;
  for (const Request& r : requests) {
    ids.push_back(core.add_request(r));
  }
  while (core.has_work()) {
    for (const auto& ev : core.step()) {
      record(got, ev);
      if (ev.finish == RequestFinish::Error) errors.push_back(ev.error);
    }
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("did not reach the decode pool intact"), std::string::npos) << errors[0];
  int failed = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Outcome& o = got[ids[i]];
    ASSERT_EQ(o.n_finish_events, 1) << "request " << i;
    const Outcome want = run_alone(requests[i], 32);
    if (o.finish == RequestFinish::Error) {
      ++failed;
      ASSERT_EQ(o.tokens.size(), 1u);
      EXPECT_EQ(o.tokens[0], want.tokens[0]);
    } else {
      EXPECT_EQ(o.tokens, want.tokens) << "request " << i;
    }
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(core.stats().kv_blocks_used, 0);
  EXPECT_EQ(runner.check_mirrors(core.kv()), std::vector<int>{});
}

bool parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--model") g_setup.model = value();
    else if (a == "--tp") g_setup.layout.tp = std::stoi(value());
    else if (a == "--pp") g_setup.layout.pp = std::stoi(value());
    else if (a == "--ep") g_setup.layout.ep = true;
    else if (a == "--disaggregate") dist::parse_disaggregate(value(), g_setup.layout);
    else if (a == "--f32") g_setup.act = Activations::F32;
    else if (a == "--exact") g_setup.act = Activations::F32, g_setup.kv = KvType::F32;
    else if (a.rfind("--gtest", 0) != 0) return false;
  }
  return true;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) {
  using namespace peregrine;
  if (!parse(argc, argv)) {
    std::fprintf(stderr, "usage: mpi_engine_test --model NAME --tp T --pp P [--ep] [--f32] [gtest flags]\n");
    return 2;
  }
  dist::DistSession session(g_setup.layout, "mpi_engine_test", std::chrono::milliseconds(20000));
  g_session = &session;
  try {
    session.load([&] { return open_model(session.rank()); }, std::make_shared<CpuContext>(1, g_setup.act));
  } catch (const dist::QuietExit& e) {
    return e.code;
  }
  if (session.is_worker()) return session.serve_steps();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
