// The guarded context (backend/guarded_context.h): its memory cannot be touched from the host
// outside its calls, every operation works through the guard with the scalar CPU context's bits,
// and models on it give the scalar CPU context's logits bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backends.h"
#include "backend/cpu_context.h"
#include "backend/guarded_context.h"
#include "backend/host_kv.h"
#include "common/test_paths.h"
#include "format/llama2c.h"
#include "kernels/kernel_table.h"
#include "model/model.h"
#include "synth/synthetic.h"

namespace peregrine {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

ModelFile synth_model(const std::string& preset, TensorType type) {
  // Per process: ctest runs this file's tests in parallel processes.
  const auto dir = test::scratch_dir("guarded_" + preset + "_" + std::to_string(::getpid()));
  const auto path = dir / (preset + "-" + std::string(tensor_type_name(type)) + ".gguf");
  write_synthetic_gguf(*synthetic_preset(preset), type, 7, path);
  return open_model_file(path);
}

float host_read(const Buffer& b) { return *static_cast<volatile const float*>(b.as<float>().data()); }
void host_write(const Buffer& b) { *static_cast<volatile float*>(b.as<float>().data()) = 1.f; }

TEST(GuardedContextDeathTest, TheHostCannotTouchItsMemoryOutsideItsCalls) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GuardedContext ctx(1);
  const Buffer b = ctx.allocate(100 * sizeof(float));
  const std::vector<float> in = random_floats(100, 1);
  std::vector<float> out(100);
  ctx.copy_from_host(in, b.as<float>());
  ctx.copy_to_host(b.as<float>(), out);
  EXPECT_EQ(in, out);  // through the context's calls, the memory is there
  EXPECT_DEATH(host_read(b), "");
  EXPECT_DEATH(host_write(b), "");
  // An operation that throws leaves the memory protected as well.
  EXPECT_THROW(ctx.copy_to_host(b.as<float>(), std::span<float>(out).first(3)), std::invalid_argument);
  EXPECT_DEATH(host_read(b), "");
  // A buffer made while another is open by a call is protected after the call too.
  const Buffer late = ctx.allocate(8);
  EXPECT_DEATH(host_read(late), "");
}

// The KV storage is the context's memory too: written and read through its calls, unreadable
// from the host between them.
TEST(GuardedContextDeathTest, TheHostCannotTouchItsKvStorage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GuardedContext ctx(1);
  const std::unique_ptr<KvStorage> kv = ctx.allocate_kv({KvShape{1, 2, 4}, KvType::F32, 2, 4});
  const std::vector<float> k = random_floats(8, 2), v = random_floats(8, 3);
  const int64_t rows[] = {5};
  const int64_t n_ctx[] = {1};
  const BlockId blocks[] = {0, 1};
  const std::span<const BlockId> tables[] = {blocks};
  ctx.write_kv(*kv, 0, {rows, n_ctx, tables}, k, v);
  std::vector<float> k_back(8), v_back(8);
  ctx.read_kv_row(*kv, 0, 5, k_back, v_back);
  EXPECT_EQ(k, k_back);
  EXPECT_EQ(v, v_back);
  const float* stored = host_kv(*kv).layer_view(0).k_f32;
  EXPECT_DEATH((void)*static_cast<volatile const float*>(stored), "");
}

TEST(GuardedContext, BuffersGiveTheirPagesBackAndMayOutliveTheContext) {
  Buffer kept;
  {
    GuardedContext ctx(1);
    {
      const Buffer a = ctx.allocate(10), b = ctx.allocate(5000);
      EXPECT_EQ(ctx.live_regions(), 2u);
      EXPECT_EQ(b.bytes(), 5000u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.as<float>().data()) % static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), 0u);
    }
    EXPECT_EQ(ctx.live_regions(), 0u);
    EXPECT_TRUE(ctx.allocate(0).empty());
    kept = ctx.allocate(64);
  }
  kept = Buffer();  // released after its context: no crash, no leak reported
}

TEST(GuardedContext, IsRegisteredAsABackend) {
  const auto ctx = make_context({.name = "guarded", .threads = 2});
  EXPECT_NE(ctx->describe().find("guarded"), std::string::npos) << ctx->describe();
  EXPECT_EQ(ctx->instruction_set(), "scalar");
  EXPECT_EQ(ctx->n_threads(), 2);
}

// Every operation through the guard, on guarded buffers, against the scalar CPU context on host
// vectors: the same bits.
class GuardedOps : public ::testing::Test {
 protected:
  GuardedContext g{2};
  CpuContext c{2, Activations::Q8, Isa::Scalar};
  std::vector<Buffer> held;

  // A guarded buffer holding v.
  std::span<float> put(std::span<const float> v) {
    held.push_back(g.allocate(v.size() * sizeof(float)));
    const std::span<float> s = held.back().as<float>().first(v.size());
    g.copy_from_host(v, s);
    return s;
  }
  std::span<float> zeros(size_t n) { return put(std::vector<float>(n)); }
  void same(std::span<const float> guarded, const std::vector<float>& want, const char* what) {
    std::vector<float> got(guarded.size());
    g.copy_to_host(guarded, got);
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size())) << what;
  }
};

TEST_F(GuardedOps, ElementwiseOpsGiveTheScalarBits) {
  const int64_t n = 3, w = 64;
  const auto x0 = random_floats(n * w, 2), y0 = random_floats(n * w, 3), bias = random_floats(w, 4);
  const auto gx = put(x0), gy = put(y0);
  std::vector<float> x = x0, y = y0;
  g.rmsnorm(gx, bias, 1e-5f, gy, n);
  c.rmsnorm(x, bias, 1e-5f, y, n);
  same(gy, y, "rmsnorm");
  g.add_bias(gx, bias, n);
  c.add_bias(x, bias, n);
  same(gx, x, "add_bias");
  g.add(gx, gy);
  c.add(x, y);
  same(gx, x, "add");
  g.swiglu(gx, gy);
  c.swiglu(x, y);
  same(gx, x, "swiglu");
  g.geglu(gy, gx);
  c.geglu(y, x);
  same(gy, y, "geglu");
  g.silu(gx);
  c.silu(x);
  same(gx, x, "silu");
  g.scale(gx, 0.5f);
  c.scale(x, 0.5f);
  same(gx, x, "scale");
  g.softcap(gx, 3.f);
  c.softcap(x, 3.f);
  same(gx, x, "softcap");
  const std::vector<float> gate = {0.5f, -2.f, 1.f};
  g.sigmoid_gate(gx, gate, n);
  c.sigmoid_gate(x, gate, n);
  same(gx, x, "sigmoid_gate");
  const std::vector<int32_t> rows = {2, 0, 2};
  const auto gg = zeros(3 * w), go = zeros(n * w);
  std::vector<float> hg(3 * w), ho(n * w);
  g.gather_rows(gx, rows, gg, w);
  c.gather_rows(x, rows, hg, w);
  same(gg, hg, "gather_rows");
  const std::vector<float> scales = {0.25f, 2.f, -1.f};
  g.combine_rows(gg, rows, scales, go, w);
  c.combine_rows(hg, rows, scales, ho, w);
  same(go, ho, "combine_rows");
  const std::vector<int32_t> positions = {0, 5, 9};
  const RopeParams rope{RopeStyle::Adjacent, 16, 10000.f, 1.f, {}};
  const auto gcs = zeros(n * 16);
  std::vector<float> hcs(n * 16);
  g.rope_angles(positions, rope, gcs);
  c.rope_angles(positions, rope, hcs);
  same(gcs, hcs, "rope_angles");
  g.rope(gx, 4, 16, rope, gcs, n);
  c.rope(x, 4, 16, rope, hcs, n);
  same(gx, x, "rope");
  const MoeRouting routing{8, 2, MoeGating::Softmax, true, 1.f};
  const auto logits0 = random_floats(n * 8, 5);
  std::vector<int32_t> ge(n * 2), he(n * 2);
  std::vector<float> gw(n * 2), hw(n * 2);
  g.route_experts(put(logits0), routing, ge, gw);
  c.route_experts(logits0, routing, he, hw);
  EXPECT_EQ(ge, he);
  EXPECT_EQ(gw, hw);
}

TEST_F(GuardedOps, MatrixKvAndExpertOpsGiveTheScalarBits) {
  const ModelFile file = synth_model("tiny-mixtral", TensorType::Q4_0);
  const TensorView &emb = file.require("token_embd.weight"), &wq = file.require("blk.0.attn_q.weight"),
                   &wk = file.require("blk.0.attn_k.weight"), &wv = file.require("blk.0.attn_v.weight"),
                   &up = file.require("blk.0.ffn_up_exps.weight");
  const int64_t n = 5, dim = wq.shape[0], qd = wq.shape[1], kvd = wk.shape[1];
  const std::vector<TokenId> tokens = {1, 7, 3, 7, 100};
  const auto gx = zeros(n * dim);
  std::vector<float> x(n * dim);
  g.embed(emb, tokens, gx);
  c.embed(emb, tokens, x);
  same(gx, x, "embed");
  const auto gq = zeros(n * qd), gk = zeros(n * kvd), gv = zeros(n * kvd);
  std::vector<float> q(n * qd), k(n * kvd), v(n * kvd);
  g.matmul(wq, gx, gq, n);
  c.matmul(wq, x, q, n);
  same(gq, q, "matmul");
  const MatmulOutput gouts[] = {{&wk, gk}, {&wv, gv}}, houts[] = {{&wk, k}, {&wv, v}};
  g.matmuls(gouts, gx, n);
  c.matmuls(houts, x, n);
  same(gk, k, "matmuls k");
  same(gv, v, "matmuls v");
  const auto gg = zeros(n * kvd), gu = zeros(n * kvd);
  std::vector<float> hg(n * kvd), hu(n * kvd);
  g.matmul_glu(wk, wv, Glu::Silu, gx, gg, gu, n);
  c.matmul_glu(wk, wv, Glu::Silu, x, hg, hu, n);
  same(gg, hg, "matmul_glu gate");
  same(gu, hu, "matmul_glu up");
  // K/V of 5 tokens of one sequence, then every token attends.
  const int64_t hd = ModelConfig::from_model_file(file).head_dim;
  const KvShape shape{1, kvd / hd, hd};
  // Each context's own storage (the guarded one in its protected memory), one block table.
  KvCache gkv(g.allocate_kv({shape, KvType::F16, 4, 4})), hkv(c.allocate_kv({shape, KvType::F16, 4, 4}));
  ASSERT_TRUE(gkv.pool().reserve(0, n));
  std::vector<int64_t> rows, n_ctx;
  std::vector<std::span<const BlockId>> tables;
  for (int64_t t = 0; t < n; ++t) {
    rows.push_back(gkv.pool().row_of(0, t));
    n_ctx.push_back(t + 1);
    tables.push_back(gkv.pool().block_table(0)->blocks());
  }
  const KvBatchLayout layout{rows, n_ctx, tables};
  g.write_kv(gkv.storage(), 0, layout, gk, gv);
  c.write_kv(hkv.storage(), 0, layout, k, v);
  const auto gatt = zeros(n * qd);
  std::vector<float> att(n * qd);
  g.attention(gkv.storage(), 0, layout, qd / hd, AttentionParams(0.125f), gq, gatt);
  c.attention(hkv.storage(), 0, layout, qd / hd, AttentionParams(0.125f), q, att);
  same(gatt, att, "attention");
  // Experts 0 (rows 0-1) and 3 (rows 2-4) of the up stack.
  const std::vector<int64_t> offsets = {0, 2, 2, 2, 5, 5, 5, 5, 5};
  const auto gy = zeros(n * up.shape[1]);
  std::vector<float> y(n * up.shape[1]);
  g.matmul_experts(up, offsets, gx, gy);
  c.matmul_experts(up, offsets, x, y);
  same(gy, y, "matmul_experts");
}

TEST(GuardedContext, SiluIsSwigluWithOnesOnEveryPath) {
  const auto x0 = random_floats(1000, 9);  // chunks of 256 and a tail
  for (Isa isa : supported_isas()) {
    CpuContext ctx(1, Activations::Q8, isa);
    std::vector<float> a = x0, b = x0;
    ctx.silu(a);
    ctx.swiglu(b, std::vector<float>(b.size(), 1.f));
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size())) << isa_name(isa);
  }
}

// Logits of a prompt of two sequences and three decode steps.
std::vector<float> run_model(const ModelFile& file, std::shared_ptr<ExecutionContext> ctx) {
  Model m(file, std::move(ctx));
  KvCache kv = m.make_kv_cache(KvType::F16, 16, 4);
  EXPECT_TRUE(kv.pool().reserve(0, 12) && kv.pool().reserve(1, 12));
  const auto nv = static_cast<int>(m.config().n_vocab);
  std::vector<float> all, logits;
  Batch b;
  for (int i = 0; i < 6; ++i) b.add((37 * i + 5) % nv, i, 0, i == 5);
  for (int i = 0; i < 3; ++i) b.add((11 * i + 2) % nv, i, 1, true);
  for (int step = 0; step < 4; ++step) {
    m.forward(b, kv, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    b.clear();
    b.add(100 + step, 6 + step, 0, true);
    b.add(200 + step, 3 + step, 1, true);
  }
  return all;
}

TEST(GuardedContext, ModelsGiveTheScalarCpuContextsLogits) {
  const std::vector<std::pair<std::string, ModelFile>> models = {
      {"stories260K", read_llama2c(test::shared_file("models/stories260K/stories260K.bin"),
                                   test::shared_file("models/stories260K/tok512.bin"))},
      {"tiny-mixtral q4_0", synth_model("tiny-mixtral", TensorType::Q4_0)},
      {"tiny-qwen2moe q8_0", synth_model("tiny-qwen2moe", TensorType::Q8_0)}};
  for (const auto& [name, file] : models) {
    const auto want = run_model(file, std::make_shared<CpuContext>(2, Activations::Q8, Isa::Scalar));
    const auto guarded = std::make_shared<GuardedContext>(2);
    const auto got = run_model(file, guarded);
    ASSERT_EQ(want.size(), got.size()) << name;
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size())) << name;
    EXPECT_EQ(guarded->live_regions(), 0u) << name << ": the model gave its buffers back";
  }
}

}  // namespace
}  // namespace peregrine
