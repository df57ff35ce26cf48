// Kernel micro-benchmarks: matmul by weight type, ISA path, batch size and thread count, on a
// TinyLlama-sized projection (2048 x 2048) and the FFN down shape (5632 -> 2048).
// Counters: weight bytes read per second and GFLOP/s (per wall-clock second; compare the CPU
// column on a loaded machine). Also the sampler's cost per row under the CLI's default filters,
// by vocabulary size (it runs once per sampled row on the engine's thread).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "kernels/bf16_pack.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "sampling/sampler.h"

namespace peregrine {
namespace {

struct Weight {
  std::vector<std::byte> bytes;
  TensorView view;
};

Weight make_weight(TensorType type, int64_t n_in, int64_t n_out) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> row(static_cast<size_t>(n_in));
  Weight w;
  const size_t row_bytes = tensor_bytes(type, n_in);
  w.bytes.resize(row_bytes * static_cast<size_t>(n_out));
  for (int64_t r = 0; r < n_out; ++r) {
    for (auto& e : row) e = d(rng);
    quantize_row(type, row.data(), w.bytes.data() + static_cast<size_t>(r) * row_bytes, n_in);
  }
  w.view.name = "bench";
  w.view.type = type;
  w.view.shape = {n_in, n_out};
  w.view.data = w.bytes;
  return w;
}

// Args: type, isa, n_tokens, threads, n_in, n_out, activations (0 = F32, 1 = Q8).
void BM_Matmul(benchmark::State& state) {
  const auto type = static_cast<TensorType>(state.range(0));
  const auto isa = static_cast<Isa>(state.range(1));
  const int64_t n_tok = state.range(2), threads = state.range(3), n_in = state.range(4), n_out = state.range(5);
  const auto act = state.range(6) ? Activations::Q8 : Activations::F32;
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  static std::unique_ptr<ThreadPool> pool;
  if (!pool || pool->size() != threads) pool = std::make_unique<ThreadPool>(static_cast<int>(threads));
  const Weight w = make_weight(type, n_in, n_out);
  std::vector<float> x(static_cast<size_t>(n_tok * n_in)), y(static_cast<size_t>(n_tok * n_out));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& e : x) e = d(rng);
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, threads)));
  std::vector<Q8Block> act_scratch(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
  for (auto _ : state) {
    matmul(w.view, x, y, n_tok, scratch, pool.get(), isa, act, act_scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(tensor_type_name(type)) + "/" + std::string(isa_name(isa)) +
                 (act == Activations::Q8 && has_int8_dot(type) ? "/q8-activations" : ""));
  state.counters["weight_bytes_per_s"] = benchmark::Counter(
      static_cast<double>(w.bytes.size()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(n_in * n_out * n_tok) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  for (auto type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                    TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                    TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS, TensorType::F32}) {
    for (int64_t act : has_int8_dot(type) ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0}) {
      for (auto isa : kAllIsas) {
        for (int64_t n_tok : {1, 2, 3, 5, 9, 16, 64}) {
          for (int64_t threads : {1, 2}) {
            b->Args({static_cast<int64_t>(type), static_cast<int64_t>(isa), n_tok, threads, 2048, 2048, act});
          }
        }
      }
      b->Args({static_cast<int64_t>(type), static_cast<int64_t>(Isa::Avx2), 1, 2, 5632, 2048, act});
      // Few tokens against weights far larger than the L3 (the decode / verification regime):
      // 16384 rows of 4096, one thread; the ratio to one token is what an extra row costs.
      if (act == 1 && (type == TensorType::Q8_0 || type == TensorType::Q4_0 || type == TensorType::Q4_K)) {
        for (auto isa : kAllIsas) {
          for (int64_t n_tok : {1, 2, 3, 5, 9, 16}) {
            b->Args({static_cast<int64_t>(type), static_cast<int64_t>(isa), n_tok, 1, 4096, 16384, act});
          }
        }
      }
      for (auto isa : kAllIsas) b->Args({static_cast<int64_t>(type), static_cast<int64_t>(isa), 1, 1, 2048, 256, act});
      // The demo model's gate+up (1376 rows of 256, F32, 1.4 MB: cache-resident): one token reads
      // the rows at the cache's bandwidth, five run the multiply-adds near the FMA peak, and the
      // ratio is the floor under a 5-row verification pass (docs/performance-history.md, issue 17).
      if (type == TensorType::F32) {
        for (auto isa : kAllIsas) {
          for (int64_t n_tok : {1, 2, 3, 5, 9}) {
            for (int64_t threads : {1, 2})
              b->Args({static_cast<int64_t>(type), static_cast<int64_t>(isa), n_tok, threads, 256, 1376, act});
          }
        }
      }
      // Prefill: a 512-token prompt against TinyLlama's Q/O (2048 x 2048) and down (5632 -> 2048)
      // shapes, one thread, weights in L3 (docs/performance-history.md, "Prefill against the int8 roof").
      if (act == 1 && (type == TensorType::Q8_0 || type == TensorType::Q4_0 || type == TensorType::Q4_K)) {
        for (auto isa : kAllIsas) {
          for (int64_t n_in : {2048, 5632})
            b->Args({static_cast<int64_t>(type), static_cast<int64_t>(isa), 512, 1, n_in, 2048, act});
        }
      }
    }
  }
}
BENCHMARK(BM_Matmul)->Apply(MatmulArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The bf16 path (BF16 weights, Q8 activations, AVX512-BF16): rows as stored against rows packed at
// load (kernels/bf16_pack.h). Args: packed (0/1), n_tokens, threads, n_in, n_out.
void BM_MatmulBf16(benchmark::State& state) {
  const bool packed = state.range(0) != 0;
  const int64_t n_tok = state.range(1), threads = state.range(2), n_in = state.range(3), n_out = state.range(4);
  if (!uses_bf16_dot(TensorType::BF16, Isa::Avx512, Activations::Q8)) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  static std::unique_ptr<ThreadPool> pool;
  if (!pool || pool->size() != threads) pool = std::make_unique<ThreadPool>(static_cast<int>(threads));
  Weight w = make_weight(TensorType::BF16, n_in, n_out);
  std::vector<std::byte> groups;
  if (packed) {
    groups.resize(bf16_groups_bytes(n_out, n_in));
    pack_bf16_groups(TensorType::BF16, w.bytes.data(), w.view.stride_bytes(), n_out, n_in, groups.data());
    w.view.bf16_groups = groups;
  }
  std::vector<float> x(static_cast<size_t>(n_tok * n_in), 0.5f), y(static_cast<size_t>(n_tok * n_out));
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(n_in, threads)));
  std::vector<Q8Block> act_scratch(static_cast<size_t>(act_scratch_blocks(n_tok, n_in)));
  for (auto _ : state) {
    matmul(w.view, x, y, n_tok, scratch, pool.get(), Isa::Avx512, Activations::Q8, act_scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(packed ? "packed" : "as stored");
  state.counters["weight_bytes_per_s"] = benchmark::Counter(
      static_cast<double>(w.bytes.size()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(n_in * n_out * n_tok) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
// Prefill shapes of TinyLlama (Q/O, down, gate/up) at 512 tokens, and decode against 128 MB.
BENCHMARK(BM_MatmulBf16)
    ->ArgsProduct({{0, 1}, {512}, {1, 2}, {2048, 5632}, {2048}})
    ->Args({0, 512, 2, 2048, 5632})
    ->Args({1, 512, 2, 2048, 5632})
    ->ArgsProduct({{0, 1}, {1, 2, 5}, {1, 2}, {4096}, {16384}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_Dot(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const int64_t n = state.range(1);
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (auto& e : a) e = d(rng);
  for (auto& e : b) e = d(rng);
  for (auto _ : state) benchmark::DoNotOptimize(dot(a.data(), b.data(), n, isa));
  state.SetLabel(std::string(isa_name(isa)));
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * static_cast<double>(n) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Dot)->ArgsProduct({{static_cast<int64_t>(Isa::Scalar), static_cast<int64_t>(Isa::Avx2)}, {64, 2048}});

// One sampled row: T = 0.8, top-k 40, top-p 0.95, min-p 0.05 (run's and serve's defaults) on
// logits spread like a language model's (normal, sigma 2.5, one clear favourite).
void BM_SampleRow(benchmark::State& state) {
  const auto n_vocab = static_cast<size_t>(state.range(0));
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 2.5f);
  std::vector<float> logits(n_vocab);
  for (auto& e : logits) e = d(rng);
  logits[n_vocab / 3] = 14.f;
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 40;
  params.top_p = 0.95f;
  params.min_p = 0.05f;
  Sampler sampler(params);
  const std::vector<int32_t> history{1, 2, 3};
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(logits, history).token);
}
BENCHMARK(BM_SampleRow)->Arg(1024)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace peregrine

BENCHMARK_MAIN();
