#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "kernels/bf16_pack.h"
#include "kernels/int8_layout.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/scalar.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

// Output rows per parallel task of a batch: several tasks per thread, so a thread slowed by other
// load on the machine does not hold the others up, and a multiple of the row tile and of the
// interleaved layouts' row groups (int8_layout.h: a task must start at a group; so must the
// packed bf16 rows', bf16_pack.h).
int64_t rows_per_task(int64_t n_out, int64_t n_threads) {
  static_assert(kInterleaveRows % kMatmulRowTile == 0 && kInterleaveRows % kBf16GroupRows == 0);
  if (n_threads <= 1) return n_out;
  int64_t rows = (n_out + 4 * n_threads - 1) / (4 * n_threads);
  rows = (rows + kInterleaveRows - 1) / kInterleaveRows * kInterleaveRows;
  return std::max<int64_t>(rows, kInterleaveRows);
}

// Up to this many tokens a call is decode-like: short tasks, so shrinking chunks pay.
constexpr int64_t kFewTokens = 16;
// Few-token chunks are whole multiples of this: the fused few-token kernels interleave 16 rows
// per group (simd_avx512_int8*), and a chunk that ends mid-group leaves a partial group behind.
// Every chunk starts on such a group of its matrix: the packed bf16 rows (bf16_pack.h) need it.
constexpr int64_t kFewTokenRowGroup = 2 * kMatmulRowTile;
static_assert(kFewTokenRowGroup % kInterleaveRows == 0, "few-token chunks start at interleaved groups");
static_assert(kFewTokenRowGroup % kBf16GroupRows == 0, "few-token chunks start at packed bf16 groups");
// The smallest chunk of a few-token call: one such group.
constexpr int64_t kMinChunkRows = kFewTokenRowGroup;

// Rows of the next chunk a thread claims when `left` rows of the call remain. Few tokens: guided
// self-scheduling, each chunk a 1 / (2 threads) share of what is left, down to kMinChunkRows, so
// the last chunks are short and a thread that runs out early waits for at most one small chunk
// (that wait, at the end of every call, is what decode pays per synchronization). Many tokens:
// equal chunks (rows_per_task), whose rows are reused across token blocks. A row's result does
// not depend on its chunk.
int64_t chunk_rows(int64_t left, int64_t n_out, int64_t n_tokens, int64_t n_threads) {
  if (n_tokens > kFewTokens) return rows_per_task(n_out, n_threads);
  const int64_t rows = (left + 2 * n_threads - 1) / (2 * n_threads);
  return std::max(kMinChunkRows, (rows + kFewTokenRowGroup - 1) / kFewTokenRowGroup * kFewTokenRowGroup);
}

// Below this many multiply-adds, waking another thread costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 16;

struct MatmulJob {
  const KernelTable& k;
  TensorType type;
  const float* x;
  float* y;
  int64_t n_tokens, n_in, n_out;
  float* scratch;
  int64_t scratch_per_thread;  // floats
  bool direct_f32;             // F32 rows are usable in place
  const std::byte* base;
  size_t row_bytes;

  const void* row(int64_t r) const { return base + static_cast<size_t>(r) * row_bytes; }

  // Output rows [r0, r1) for every token.
  void rows(int64_t r0, int64_t r1, int thread) const {
    if (k.matmul_float && k.float_gemm(type)) {
      k.matmul_float(type, row(r0), row_bytes, r1 - r0, x, n_in, n_tokens, n_in, y + r0, n_out);
      return;
    }
    if (n_tokens == 1 && k.dot_row && k.fused_dot(type)) {
      for (int64_t r = r0; r < r1; ++r) y[r] = k.dot_row(type, row(r), x, n_in);
      return;
    }
    float* buf = scratch + thread * scratch_per_thread;
    const int64_t tile = std::max<int64_t>(1, std::min(kMatmulRowTile, scratch_per_thread / n_in));
    const bool fused = k.fused_dot && k.fused_dot(type);
    if (k.matmul_float && !fused) {
      // Types without a fused dot (K-quants): a tile of rows dequantized once, then the
      // register-blocked float GEMM on it for every token (its order per output does not depend
      // on the tile, so a token alone and in a batch get the same bits). Fused types stay on
      // dot_f32 below: their single-token path (dot_row) has dot_f32's order, not the GEMM's.
      for (int64_t rb = r0; rb < r1; rb += tile) {
        const int64_t nr = std::min(tile, r1 - rb);
        for (int64_t i = 0; i < nr; ++i) k.dequantize_row(type, row(rb + i), buf + i * n_in, n_in);
        k.matmul_float(TensorType::F32, buf, static_cast<size_t>(n_in) * sizeof(float), nr, x, n_in, n_tokens, n_in,
                       y + rb, n_out);
      }
      return;
    }
    const float* row_ptr[kMatmulRowTile];
    for (int64_t rb = r0; rb < r1; rb += tile) {
      const int64_t nr = std::min(tile, r1 - rb);
      for (int64_t i = 0; i < nr; ++i) {
        if (direct_f32) {
          row_ptr[i] = reinterpret_cast<const float*>(row(rb + i));
          continue;
        }
        k.dequantize_row(type, row(rb + i), buf + i * n_in, n_in);
        row_ptr[i] = buf + i * n_in;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * n_in;
        float* yt = y + t * n_out + rb;
        for (int64_t i = 0; i < nr; ++i) yt[i] = k.dot_f32(row_ptr[i], xt, n_in);
      }
    }
  }
};

struct Int8MatmulJob {
  TensorType type;
  const std::byte* base;
  size_t row_bytes;
  const Q8Block* x;  // [n_tokens][n_blocks]
  float* y;          // [n_tokens][n_out]
  int64_t n_tokens, n_blocks, n_out;
  const KernelTable& k;
  std::byte* scratch;  // per thread: [scratch_per_thread] bytes for unpacked row tiles
  size_t scratch_per_thread;

  void rows(int64_t r0, int64_t r1, int thread) const {
    const std::span<std::byte> own(scratch + static_cast<size_t>(thread) * scratch_per_thread, scratch_per_thread);
    // Tokens per pass over the rows: the kernels' choice (KernelTable::int8_token_block).
    for (int64_t t0 = 0; t0 < n_tokens; t0 += k.int8_token_block) {
      const int64_t nt = std::min(k.int8_token_block, n_tokens - t0);
      k.matmul_int8(type, base + static_cast<size_t>(r0) * row_bytes, row_bytes, r1 - r0, x + t0 * n_blocks,
                    n_blocks, nt, n_blocks, y + t0 * n_out + r0, n_out, own);
    }
  }
};

// F16/BF16 rows times the group's bf16-rounded activations (uses_bf16_dot): the packed rows where
// the matrix has them (TensorView::bf16_groups, always or never for a given matrix), else as stored.
struct Bf16MatmulJob {
  const KernelTable& k;
  TensorType type;  // F16 or BF16
  const std::byte* base;
  size_t row_bytes;
  const std::byte* groups;  // the packed rows, or nullptr
  const uint16_t* x;        // [n_tokens][x_stride]
  int64_t x_stride;
  float* y;  // [n_tokens][n_out]
  int64_t n_tokens, n_in, n_out;

  void rows(int64_t r0, int64_t r1, int) const {
    if (groups != nullptr) {
      if (r0 % kBf16GroupRows != 0) throw std::logic_error("matmul: a chunk of packed rows starts mid-group");
      k.matmul_bf16_groups(groups, r0, r1, x, x_stride, n_tokens, n_in, y + r0, n_out);
      return;
    }
    k.matmul_bf16(type, base + static_cast<size_t>(r0) * row_bytes, row_bytes, r1 - r0, x, x_stride, n_tokens, n_in,
                  y + r0, n_out);
  }
};

}  // namespace

bool uses_bf16_dot(TensorType type, Isa isa, Activations act) {
  return act == Activations::Q8 && (type == TensorType::F16 || type == TensorType::BF16) && isa_supported(isa) &&
         kernel_table(isa).matmul_bf16 != nullptr;
}

TensorType int8_kernel_type(TensorType stored, Isa isa, Activations act) {
  const char* repack = std::getenv("PEREGRINE_INT8_REPACK");
  if (repack == nullptr || std::string_view(repack) != "1") return stored;
  const bool avx512 = act == Activations::Q8 && isa == Isa::Avx512 && isa_supported(isa);
  if (avx512 && stored == TensorType::Q4_0) return TensorType::Q4_0_X16;
  if (avx512 && stored == TensorType::Q8_0) return TensorType::Q8_0_X16;
  return stored;
}

float dot(const float* a, const float* b, int64_t n) { return scalar::dot_f32(a, b, n); }

float dot(const float* a, const float* b, int64_t n, Isa isa) { return kernel_table(isa).dot_f32(a, b, n); }

namespace {

// One weight of a group, ready to run any range of its output rows: the f32 path (MatmulJob), the
// integer path on the group's shared Q8 activations (Int8MatmulJob) or the bf16 path on its
// shared bf16 activations (Bf16MatmulJob).
struct GroupMember {
  std::optional<MatmulJob> f32;
  std::optional<Int8MatmulJob> int8;
  std::optional<Bf16MatmulJob> bf16;
  int64_t n_out = 0;

  void rows(int64_t r0, int64_t r1, int thread) const {
    if (int8) {
      int8->rows(r0, r1, thread);
    } else if (bf16) {
      bf16->rows(r0, r1, thread);
    } else {
      f32->rows(r0, r1, thread);
    }
  }
};

void check_sizes(const TensorView& w, size_t x_size, size_t y_size, int64_t n_tokens, bool int8) {
  const int64_t n_in = w.row_length();
  if (n_tokens < 0 || static_cast<int64_t>(x_size) != n_tokens * n_in ||
      static_cast<int64_t>(y_size) != n_tokens * w.n_rows() ||
      (int8 && n_in % tensor_type_info(w.type).block_elems != 0)) {
    throw std::invalid_argument("matmul: sizes do not match weight '" + w.name + "'");
  }
}

// Rounds every token's activations once for the whole group (round_token(t) for each token);
// splits the tokens among the threads when there are enough of them to pay for the wake-up.
template <class RoundToken>
void round_activations(int64_t n_tokens, ThreadPool* pool, RoundToken round_token) {
  const auto quantize = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) round_token(t);
  };
  const int64_t n_threads = pool ? pool->size() : 1;
  if (pool && n_tokens >= 2 * n_threads) {
    const int64_t per = (n_tokens + n_threads - 1) / n_threads;
    pool->parallel_for(n_threads, [&](int64_t task, int) {
      quantize(std::min(n_tokens, task * per), std::min(n_tokens, (task + 1) * per));
    });
  } else {
    quantize(0, n_tokens);
  }
}

}  // namespace

namespace {

// A group's members ready to run any range of their rows: inputs checked, activations rounded to
// Q8 once for the group where a member takes them, members' rows laid end to end.
struct PreparedGroup {
  std::array<GroupMember, kMaxMatmulGroup> members;
  std::array<int64_t, kMaxMatmulGroup + 1> first_row{};  // member i: rows [first_row[i], first_row[i + 1])
  int64_t n_members = 0;
  int64_t macs = 0;
};

PreparedGroup prepare_group(std::span<const MatmulTarget> targets, std::span<const float> x, int64_t n_tokens,
                            std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act,
                            std::span<Q8Block> act_scratch) {
  if (targets.empty() || targets.size() > kMaxMatmulGroup) throw std::invalid_argument("matmul: bad group size");
  const int64_t n_in = targets[0].w->row_length();
  const int64_t n_threads = pool ? pool->size() : 1;
  if (static_cast<int64_t>(scratch.size()) < n_threads * n_in) {
    throw std::invalid_argument("matmul: scratch too small for weight '" + targets[0].w->name + "'");
  }
  bool any_int8 = false, any_bf16 = false;
  for (const MatmulTarget& t : targets) {
    const bool int8 = act == Activations::Q8 && has_int8_dot(t.w->type);
    if (t.w->row_length() != n_in) throw std::invalid_argument("matmul: a group's weights differ in input length");
    check_sizes(*t.w, x.size(), t.y.size(), n_tokens, int8);
    any_int8 = any_int8 || int8;
    any_bf16 = any_bf16 || uses_bf16_dot(t.w->type, isa, act);
  }
  if ((any_int8 || any_bf16) && static_cast<int64_t>(act_scratch.size()) < act_scratch_blocks(n_tokens, n_in)) {
    throw std::invalid_argument("matmul: activation scratch too small for weight '" + targets[0].w->name + "'");
  }
  PreparedGroup g;
  if (n_tokens == 0) return g;
  const KernelTable& k = kernel_table(isa);
  // The bf16 rows after the Q8 blocks (act_scratch_blocks), each 64-byte aligned.
  const int64_t n_blocks = n_in / 32, bf16_stride = (n_in + 31) / 32 * 32;
  uint16_t* bf16_x = nullptr;
  if (any_bf16) {
    const auto after_q8 = reinterpret_cast<std::uintptr_t>(act_scratch.data() + n_tokens * ((n_in + 31) / 32));
    bf16_x = reinterpret_cast<uint16_t*>((after_q8 + 63) / 64 * 64);
  }
  if (any_int8 || any_bf16) {  // both forms in one pass, one meeting of the threads
    round_activations(n_tokens, pool, [&](int64_t t) {
      if (any_int8) k.quantize_q8_blocks(x.data() + t * n_in, act_scratch.data() + t * n_blocks, n_in);
      if (any_bf16) k.round_bf16(x.data() + t * n_in, bf16_x + t * bf16_stride, n_in);
    });
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const TensorView& w = *targets[i].w;
    GroupMember& m = g.members[i];
    m.n_out = w.n_rows();
    if (uses_bf16_dot(w.type, isa, act)) {
      if (!w.bf16_groups.empty() && w.bf16_groups.size() != bf16_groups_bytes(m.n_out, n_in)) {
        throw std::invalid_argument("matmul: packed rows of weight '" + w.name + "' do not match its shape");
      }
      const std::byte* groups = w.bf16_groups.empty() || !k.matmul_bf16_groups ? nullptr : w.bf16_groups.data();
      m.bf16.emplace(Bf16MatmulJob{k, w.type, w.data.data(), w.stride_bytes(), groups, bf16_x, bf16_stride,
                                   targets[i].y.data(), n_tokens, n_in, m.n_out});
    } else if (act == Activations::Q8 && has_int8_dot(w.type)) {
      // The f32 scratch, unused on this path, holds each thread's unpacked row tiles.
      m.int8.emplace(Int8MatmulJob{w.type, w.data.data(), w.stride_bytes(), act_scratch.data(), targets[i].y.data(),
                                   n_tokens, n_in / 32, m.n_out, k, reinterpret_cast<std::byte*>(scratch.data()),
                                   scratch.size() / static_cast<size_t>(n_threads) * sizeof(float)});
    } else {
      // F32 rows are used in place when the mapping is aligned (it is for GGUF and llama2.c files).
      const bool direct =
          w.type == TensorType::F32 && reinterpret_cast<std::uintptr_t>(w.data.data()) % alignof(float) == 0;
      m.f32.emplace(MatmulJob{k, w.type, x.data(), targets[i].y.data(), n_tokens, n_in, m.n_out, scratch.data(),
                              static_cast<int64_t>(scratch.size()) / n_threads, direct, w.data.data(),
                              w.stride_bytes()});
    }
    g.macs += m.n_out * n_in * n_tokens;
    g.first_row[i + 1] = g.first_row[i] + m.n_out;
  }
  g.n_members = static_cast<int64_t>(targets.size());
  return g;
}

// Whether a call of this size is worth waking the other threads for.
bool run_parallel(const ThreadPool* pool, int64_t macs, int64_t total_rows) {
  return pool && pool->size() > 1 && macs >= kMinParallelMacs && total_rows > kMatmulRowTile;
}

// Runs rows(r0, r1, thread) over [0, total) in chunks claimed from a shared counter (chunk_rows:
// shrinking towards the end for few tokens), one task per thread. split(at) caps a chunk that
// starts at `at` and names the n_out its size follows: {a member's end, its n_out}, so no chunk
// spans two members.
template <class Rows, class Split>
void claim_rows(ThreadPool& pool, int64_t total, int64_t n_tokens, Split split, Rows rows) {
  const int64_t n_threads = pool.size();
  std::atomic<int64_t> next{0};
  pool.parallel_for(n_threads, [&](int64_t, int thread) {
    int64_t at = next.load(std::memory_order_relaxed);
    while (at < total) {
      const auto [end, n_out] = split(at);
      const int64_t r1 = std::min(end, at + chunk_rows(total - at, n_out, n_tokens, n_threads));
      if (!next.compare_exchange_weak(at, r1, std::memory_order_relaxed)) continue;
      rows(at, r1, thread);
      at = next.load(std::memory_order_relaxed);
    }
  });
}

}  // namespace

void matmul_group(std::span<const MatmulTarget> targets, std::span<const float> x, int64_t n_tokens,
                  std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act,
                  std::span<Q8Block> act_scratch) {
  const PreparedGroup g = prepare_group(targets, x, n_tokens, scratch, pool, isa, act, act_scratch);
  if (n_tokens == 0) return;
  const int64_t total = g.first_row[static_cast<size_t>(g.n_members)];
  if (!run_parallel(pool, g.macs, total)) {
    for (int64_t i = 0; i < g.n_members; ++i) g.members[i].rows(0, g.members[i].n_out, 0);
    return;
  }
  // Rows of the members in order; a chunk ends at its member's last row.
  const auto member_of = [&](int64_t at) {
    int64_t i = 0;
    while (at >= g.first_row[i + 1]) ++i;
    return i;
  };
  claim_rows(
      *pool, total, n_tokens,
      [&](int64_t at) {
        const int64_t i = member_of(at);
        return std::pair<int64_t, int64_t>{g.first_row[i + 1], g.members[i].n_out};
      },
      [&](int64_t r0, int64_t r1, int thread) {
        const int64_t i = member_of(r0);
        g.members[i].rows(r0 - g.first_row[i], r1 - g.first_row[i], thread);
      });
}

void matmul_glu(const MatmulTarget& gate, const MatmulTarget& up, Glu glu, std::span<const float> x, int64_t n_tokens,
                std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act, std::span<Q8Block> act_scratch) {
  if (gate.w->n_rows() != up.w->n_rows()) throw std::invalid_argument("matmul_glu: gate and up differ in rows");
  const MatmulTarget pair[] = {gate, up};
  const PreparedGroup g = prepare_group(pair, x, n_tokens, scratch, pool, isa, act, act_scratch);
  if (n_tokens == 0) return;
  const int64_t ffn = g.members[0].n_out;
  const auto activate = kernel_table(isa).glu;
  // Rows [r0, r1) of both products, then the activation of those elements of every token, by the
  // thread that computed them while they are in its cache.
  const auto rows = [&](int64_t r0, int64_t r1, int thread) {
    g.members[0].rows(r0, r1, thread);
    g.members[1].rows(r0, r1, thread);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto at = static_cast<size_t>(t * ffn + r0), len = static_cast<size_t>(r1 - r0);
      activate(glu, gate.y.data() + at, up.y.data() + at, gate.y.data() + at, static_cast<int64_t>(len));
    }
  };
  if (!run_parallel(pool, g.macs, 2 * ffn)) return rows(0, ffn, 0);
  claim_rows(
      *pool, ffn, n_tokens,
      [&](int64_t) {
        return std::pair<int64_t, int64_t>{ffn, ffn};
      },
      rows);
}

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act, std::span<Q8Block> act_scratch) {
  const MatmulTarget one{&w, y};
  matmul_group({&one, 1}, x, n_tokens, scratch, pool, isa, act, act_scratch);
}

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> scratch, ThreadPool* pool, Isa isa) {
  matmul(w, x, y, n_tokens, scratch, pool, isa, Activations::F32, {});
}

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> row_scratch) {
  matmul(w, x, y, n_tokens, row_scratch, nullptr, active_isa());
}

}  // namespace peregrine
