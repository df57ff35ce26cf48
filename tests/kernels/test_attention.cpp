#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/host_kv.h"
#include "kernels/attention.h"
#include "kernels/isa.h"
#include "kernels/x86/simd_avx2.h"

namespace peregrine {
namespace {

struct Case {
  const char* name;
  int64_t n_heads, n_kv_heads, head_dim, block_size, n_ctx;
  int64_t window = 0;   // sliding window (0: every position)
  float softcap = 0.f;  // attention logit soft-capping (0: none)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Naive attention over contiguous K/V: scores row, softmax, weighted sum, in double; only the last
// `window` positions when c.window > 0, scores soft-capped when c.softcap > 0.
// q: [n_heads][hd], k, v: [n_ctx][n_kv_heads][hd]
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, const Case& c) {
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  std::vector<double> out(size_t(c.n_heads * hd), 0.0);
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const int64_t g = h / group;
    const int64_t first = c.window > 0 ? std::max<int64_t>(0, c.n_ctx - c.window) : 0;
    std::vector<double> s(size_t(c.n_ctx), 0.0);
    double mx = -1e300;
    for (int64_t p = first; p < c.n_ctx; ++p) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i) d += double(q[h * hd + i]) * k[(p * c.n_kv_heads + g) * hd + i];
      s[p] = d / std::sqrt(double(hd));
      if (c.softcap > 0) s[p] = c.softcap * std::tanh(s[p] / c.softcap);
      mx = std::max(mx, s[p]);
    }
    double sum = 0;
    for (int64_t p = first; p < c.n_ctx; ++p) sum += (s[p] = std::exp(s[p] - mx));
    for (int64_t p = first; p < c.n_ctx; ++p)
      for (int64_t i = 0; i < hd; ++i) out[h * hd + i] += s[p] / sum * v[(p * c.n_kv_heads + g) * hd + i];
  }
  return out;
}

// attention_tokens over a run of queries ending at c.n_ctx positions (prefill: each one position
// longer than the last; across tile and segment ends where the case is long enough), in order and
// reversed, gives every token the bits attention() gives it alone, for every KV head.
void expect_tokens_match_alone(const Case& c, const KvLayerView& view, std::span<const BlockId> table,
                               const AttentionParams& params, Isa isa) {
  const int64_t n_q = std::min<int64_t>(c.n_ctx, 11), qd = c.n_heads * c.head_dim;
  std::mt19937 rng(static_cast<uint32_t>(c.n_ctx * 7 + c.head_dim));
  std::uniform_real_distribution<float> d(-3.f, 3.f);
  std::vector<float> q(size_t(n_q * qd));
  for (auto& e : q) e = d(rng);
  std::vector<int64_t> n_ctx(static_cast<size_t>(n_q));
  for (int64_t u = 0; u < n_q; ++u) n_ctx[size_t(u)] = c.n_ctx - n_q + 1 + u;
  const int64_t group = c.n_heads / c.n_kv_heads;
  std::vector<float> scratch(size_t(attention_tokens_scratch_floats(n_q, group, c.head_dim)));
  std::vector<float> one_scratch(size_t(attention_scratch_floats(c.n_heads, c.head_dim)));
  for (bool reversed : {false, true}) {
    if (reversed) std::reverse(n_ctx.begin(), n_ctx.end());
    std::vector<float> out(q.size(), -7.f), alone(q.size(), -9.f);
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
      attention_tokens(q, n_q, c.n_heads, view, table, n_ctx, params, out, scratch, g, isa);
    }
    for (int64_t u = 0; u < n_q; ++u) {
      const auto at = [&](auto& v) { return std::span(v).subspan(size_t(u * qd), size_t(qd)); };
      attention(at(q), c.n_heads, view, table, n_ctx[size_t(u)], params, at(alone), one_scratch, 0, c.n_kv_heads, isa);
    }
    ASSERT_EQ(0, std::memcmp(out.data(), alone.data(), sizeof(float) * out.size()))
        << c.name << " " << isa_name(isa) << (reversed ? " reversed" : "");
  }
}

class AttentionCases : public ::testing::TestWithParam<std::tuple<Case, KvType>> {};

TEST_P(AttentionCases, PagedMatchesNaiveContiguous) {
  const auto [c, type] = GetParam();
  if (!kv_type_supports_head_dim(type, c.head_dim)) GTEST_SKIP() << kv_type_name(type) << " needs head_dim % 32 == 0";
  const KvShape shape{2, c.n_kv_heads, c.head_dim};
  test::HostKv kv(shape, type, 3 * (c.n_ctx / c.block_size + 3), static_cast<int32_t>(c.block_size));
  // Interleave reservations of three sequences so sequence 1's blocks are scattered, then free
  // the others so later blocks come back in a scrambled order.
  for (int64_t n = c.block_size; n <= c.n_ctx + c.block_size; n += c.block_size) {
    ASSERT_TRUE(kv.pool.reserve(0, n));
    ASSERT_TRUE(kv.pool.reserve(2, n / 2 + 1));
    ASSERT_TRUE(kv.pool.reserve(1, std::min(n, c.n_ctx)));
  }
  const BlockTable& seq_table = *kv.pool.block_table(1);
  bool scrambled = false;
  for (int64_t i = 1; i < seq_table.size(); ++i) scrambled |= seq_table[i] != seq_table[i - 1] + 1;
  ASSERT_TRUE(scrambled || seq_table.size() < 2);

  std::mt19937 rng(static_cast<uint32_t>(c.n_heads * 100 + c.n_ctx));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  const int64_t kvd = c.n_kv_heads * c.head_dim;
  std::vector<float> q(size_t(c.n_heads * c.head_dim)), k(size_t(c.n_ctx * kvd)), v(size_t(c.n_ctx * kvd));
  for (auto& e : q) e = 3 * d(rng);
  for (auto& e : k) e = d(rng);
  for (auto& e : v) e = d(rng);
  std::vector<float> junk(size_t(kvd), 99.f);
  for (int64_t p = 0; p < c.n_ctx; ++p) {
    std::span<const float> kp(k.data() + p * kvd, size_t(kvd)), vp(v.data() + p * kvd, size_t(kvd));
    kv.storage.write_row(1, kv.pool.row_of(1, p), kp, vp);
    kv.storage.write_row(0, kv.pool.row_of(1, p), junk, junk);  // another layer must not leak in
  }
  // Blocks wholly before the window are never read: point their entries at a block of junk (as if
  // given back and reused), so reading one would show.
  std::vector<BlockId> table(seq_table.blocks().begin(), seq_table.blocks().end());
  const int64_t first = attention_first_position(c.n_ctx, c.window);
  const BlockId junk_block = kv.pool.block_table(0)->blocks()[0];
  for (int64_t p = 0; p < c.block_size; ++p)
    kv.storage.write_row(1, int64_t(junk_block) * c.block_size + p, junk, junk);
  for (int64_t b = 0; b < first / c.block_size; ++b) table[size_t(b)] = junk_block;
  // Read back what the cache holds so f16/bf16 rounding is part of the reference's input.
  std::vector<float> kq(k.size()), vq(v.size());
  for (int64_t p = 0; p < c.n_ctx; ++p) {
    kv.storage.read_row(1, kv.pool.row_of(1, p), std::span<float>(kq.data() + p * kvd, size_t(kvd)),
                        std::span<float>(vq.data() + p * kvd, size_t(kvd)));
  }
  const auto ref = naive_attention(q, kq, vq, c);
  std::vector<float> out(q.size()), scratch(size_t(attention_scratch_floats(c.n_heads, c.head_dim)));
  const AttentionParams params(1.0f / std::sqrt(float(c.head_dim)), c.window, c.softcap);
  attention(q, c.n_heads, kv.storage.layer_view(1), table, c.n_ctx, params, out, scratch);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << c.name << " i=" << i;
  // Every ISA path; and one call per KV head (as the model's threads split it) gives the same bits
  // as one call over all heads.
  for (Isa isa : supported_isas()) {
    std::vector<float> all(q.size()), split(q.size(), -7.f);
    attention(q, c.n_heads, kv.storage.layer_view(1), table, c.n_ctx, params, all, scratch, 0, c.n_kv_heads, isa);
    for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], 2e-5) << c.name << " " << isa_name(isa);
    for (int64_t g = c.n_kv_heads - 1; g >= 0; --g) {
      attention(q, c.n_heads, kv.storage.layer_view(1), table, c.n_ctx, params, split, scratch, g, g + 1, isa);
    }
    ASSERT_EQ(0, std::memcmp(all.data(), split.data(), sizeof(float) * all.size())) << c.name << " " << isa_name(isa);
    // Flash-Decoding: each segment on its own (here in reverse order, as threads might finish),
    // then merged, gives the same bits as the single call.
    const int64_t group = c.n_heads / c.n_kv_heads, part = attention_partial_floats(group, c.head_dim);
    // A window skips the segments before it.
    const int64_t s0 = attention_first_segment(c.n_ctx, c.window), n_seg = attention_segments(c.n_ctx) - s0;
    std::vector<float> flash(q.size(), -7.f);
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
      std::vector<float> partials(size_t(n_seg * part));
      for (int64_t s = n_seg - 1; s >= 0; --s) {
        attention_segment(q, c.n_heads, kv.storage.layer_view(1), table, c.n_ctx, params, g, s0 + s,
                          std::span<float>(partials).subspan(size_t(s * part), size_t(part)), scratch, isa);
      }
      attention_merge(partials, n_seg, c.n_heads, c.head_dim, c.n_kv_heads, g, flash);
    }
    ASSERT_EQ(0, std::memcmp(all.data(), flash.data(), sizeof(float) * all.size())) << c.name << " flash-decoding";
    if (c.window == 0) expect_tokens_match_alone(c, kv.storage.layer_view(1), table, params, isa);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCases,
    ::testing::Combine(::testing::Values(Case{"MHA", 4, 4, 8, 5, 23}, Case{"GQA", 8, 2, 6, 4, 17},
                                         Case{"MQA", 4, 1, 16, 16, 40}, Case{"single", 2, 1, 4, 3, 1},
                                         // past one tile and one Flash-Decoding segment, ragged
                                         Case{"GQA_long", 8, 2, 64, 16, 700}, Case{"MHA_ragged", 3, 3, 20, 7, 290},
                                         // 8k context, MQA (the longest row per KV head)
                                         Case{"MQA_8k", 4, 1, 64, 16, 8192}),
                       ::testing::Values(KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0,
                                         KvType::FP8_E4M3, KvType::Q4_0)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + std::string(kv_type_name(std::get<1>(info.param)));
    });

// Sliding windows (smaller and larger than a block, than a tile, than a Flash-Decoding segment and
// than the context; ragged) and Gemma 2's soft-capping, with and without a window.
INSTANTIATE_TEST_SUITE_P(
    Windows, AttentionCases,
    ::testing::Combine(::testing::Values(Case{"W3_in_block", 4, 2, 8, 5, 23, 3},
                                         Case{"W7_over_blocks", 4, 2, 8, 5, 23, 7}, Case{"W1", 2, 1, 4, 3, 11, 1},
                                         Case{"W40_over_ctx", 4, 4, 8, 4, 17, 40},
                                         Case{"W_eq_ctx", 4, 1, 16, 16, 40, 40},
                                         Case{"W37_of_290", 3, 3, 20, 7, 290, 37},     // skips segment 0
                                         Case{"W300_of_700", 8, 2, 64, 16, 700, 300},  // starts mid-segment
                                         Case{"W100_of_8k", 4, 1, 64, 16, 8192, 100},
                                         Case{"softcap", 4, 2, 32, 8, 45, 0, 2.f},
                                         Case{"softcap_W9", 4, 2, 32, 8, 300, 9, 2.f}),
                       ::testing::Values(KvType::F32, KvType::F16, KvType::Q8_0, KvType::FP8_E4M3,
                                         KvType::Q4_0)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + std::string(kv_type_name(std::get<1>(info.param)));
    });

// The AVX2 softmax pieces against plain references: the vector exp within 2 ulp of std::exp over
// the whole range attention feeds it (down to far below the clamp), ragged lengths included; the
// register-held weighted sum bit-identical to one axpy per row.
TEST(AttentionAvx2, ExpShiftedMatchesStdExp) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this machine";
  for (int64_t n : {1, 7, 8, 13, 32, 1000}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> d(-100.f, 0.f);
    std::vector<float> s(static_cast<size_t>(n));
    for (auto& e : s) e = d(rng) + 3.f;
    s[0] = 3.f;  // exp(0) exactly 1
    const std::vector<float> in = s;
    const float sum = avx2::exp_shifted(s.data(), 3.f, n);
    double ref_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double ref = std::exp(double(in[i]) - 3.0);
      ref_sum += ref;
      if (double(in[i]) - 3.0 < -87) {
        ASSERT_LT(s[i], 2e-38f) << "i=" << i;  // clamped, not underflowed: still negligible
      } else {
        ASSERT_NEAR(s[i], ref, 2.5e-7 * ref) << "n=" << n << " i=" << i << " x=" << in[i] - 3.f;
      }
    }
    EXPECT_EQ(s[0], 1.f);
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
  }
}

TEST(AttentionAvx2, AccumulateRowsIsAxpyPerRow) {
  if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this machine";
  for (int64_t hd : {4, 8, 20, 64, 72}) {
    const int64_t n = 29;
    std::mt19937 rng(static_cast<uint32_t>(hd));
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> w(static_cast<size_t>(n)), v(static_cast<size_t>(n * hd)), y(static_cast<size_t>(hd));
    for (auto& e : w) e = d(rng);
    for (auto& e : v) e = d(rng);
    for (auto& e : y) e = d(rng);
    std::vector<const float*> rows;
    for (int64_t i = 0; i < n; ++i) rows.push_back(v.data() + i * hd);
    std::vector<float> ref = y;
    for (int64_t i = 0; i < n; ++i) avx2::axpy(w[static_cast<size_t>(i)], rows[static_cast<size_t>(i)], ref.data(), hd);
    avx2::accumulate_rows(w.data(), rows.data(), n, y.data(), hd);
    for (int64_t c = 0; c < hd; ++c)
      ASSERT_EQ(y[static_cast<size_t>(c)], ref[static_cast<size_t>(c)]) << "hd=" << hd << " c=" << c;
  }
}

TEST(Attention, PrefixOnlyIgnoresLaterPositions) {
  test::HostKv kv(KvShape{1, 1, 4}, KvType::F32, 4, 2);
  ASSERT_TRUE(kv.pool.reserve(0, 4));
  std::vector<float> a = {1, 2, 3, 4}, b = {-4, 0.5f, 2, 1};
  kv.storage.write_row(0, kv.pool.row_of(0, 0), a, a);
  kv.storage.write_row(0, kv.pool.row_of(0, 1), b, b);
  std::vector<float> q = {0.1f, 0.2f, 0.3f, 0.4f, -1, 1, -1, 1}, out(8),
                     scratch(size_t(attention_scratch_floats(2, 4)));
  attention(q, 2, kv.storage.layer_view(0), kv.pool.block_table(0)->blocks(), 1, 0.5f, out, scratch);
  // One position: the output is exactly its V row for every head.
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[i], a[i % 4]);
  EXPECT_THROW(attention(q, 2, kv.storage.layer_view(0), kv.pool.block_table(0)->blocks(), 5, 0.5f, out, scratch),
               std::invalid_argument);
  // attention_tokens refuses what it cannot do the same way: a sliding window, a context past the
  // table, too little scratch, a count of contexts that is not the count of tokens.
  const std::vector<int64_t> ctx = {1, 2};
  std::vector<float> q2(16, 0.5f), out2(16), scratch2(size_t(attention_tokens_scratch_floats(2, 2, 4)));
  const auto table = kv.pool.block_table(0)->blocks();
  const Isa isa = active_isa();
  attention_tokens(q2, 2, 2, kv.storage.layer_view(0), table, ctx, 0.5f, out2, scratch2, 0, isa);
  EXPECT_THROW(attention_tokens(q2, 2, 2, kv.storage.layer_view(0), table, ctx, AttentionParams(0.5f, 1), out2,
                                scratch2, 0, isa),
               std::invalid_argument);
  const std::vector<int64_t> too_long = {1, 5};
  EXPECT_THROW(attention_tokens(q2, 2, 2, kv.storage.layer_view(0), table, too_long, 0.5f, out2, scratch2, 0, isa),
               std::invalid_argument);
  std::vector<float> small(scratch2.size() - 1);
  EXPECT_THROW(attention_tokens(q2, 2, 2, kv.storage.layer_view(0), table, ctx, 0.5f, out2, small, 0, isa),
               std::invalid_argument);
  EXPECT_THROW(attention_tokens(q2, 2, 2, kv.storage.layer_view(0), table, std::span(ctx).first(1), 0.5f, out2,
                                scratch2, 0, isa),
               std::invalid_argument);
}

}  // namespace
}  // namespace peregrine
