#include "kernels/matmul.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/kernel_table.h"
#include "kernels/scalar.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

// Output rows per parallel task: several tasks per thread, so a thread slowed by other load on
// the machine does not hold the others up, and a multiple of the row tile.
int64_t rows_per_task(int64_t n_out, int64_t n_threads) {
  if (n_threads <= 1) return n_out;
  int64_t rows = (n_out + 4 * n_threads - 1) / (4 * n_threads);
  rows = (rows + kMatmulRowTile - 1) / kMatmulRowTile * kMatmulRowTile;
  return std::max<int64_t>(rows, kMatmulRowTile);
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

// Tokens whose Q8 activations are dotted with one pass over a task's rows: 64 tokens of a
// 5632-long row are 400 KB of blocks, which stay in L2 while the rows stream past.
constexpr int64_t kInt8TokenBlock = 64;

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
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kInt8TokenBlock) {
      const int64_t nt = std::min(kInt8TokenBlock, n_tokens - t0);
      k.matmul_int8(type, base + static_cast<size_t>(r0) * row_bytes, row_bytes, r1 - r0, x + t0 * n_blocks,
                    n_blocks, nt, n_blocks, y + t0 * n_out + r0, n_out, own);
    }
  }
};

}  // namespace

float dot(const float* a, const float* b, int64_t n) { return scalar::dot_f32(a, b, n); }

float dot(const float* a, const float* b, int64_t n, Isa isa) { return kernel_table(isa).dot_f32(a, b, n); }

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> scratch, ThreadPool* pool, Isa isa) {
  const int64_t n_in = w.row_length();
  const int64_t n_out = w.n_rows();
  const int64_t n_threads = pool ? pool->size() : 1;
  if (n_tokens < 0 || static_cast<int64_t>(x.size()) != n_tokens * n_in ||
      static_cast<int64_t>(y.size()) != n_tokens * n_out || static_cast<int64_t>(scratch.size()) < n_threads * n_in) {
    throw std::invalid_argument("matmul: sizes do not match weight '" + w.name + "'");
  }
  const KernelTable& k = kernel_table(isa);
  if (n_tokens == 0 || n_out == 0) return;
  // F32 rows are used in place when the mapping is aligned (it is for GGUF and llama2.c files).
  const bool direct =
      w.type == TensorType::F32 && reinterpret_cast<std::uintptr_t>(w.data.data()) % alignof(float) == 0;
  const MatmulJob job{k,     w.type,        x.data(),       y.data(),
                      n_tokens, n_in, n_out,    scratch.data(), static_cast<int64_t>(scratch.size()) / n_threads,
                      direct, w.data.data(), w.stride_bytes()};
  const int64_t chunk = rows_per_task(n_out, n_threads);
  const int64_t n_tasks = (n_out + chunk - 1) / chunk;
  if (!pool || n_tasks == 1 || n_out * n_in * n_tokens < kMinParallelMacs) {
    job.rows(0, n_out, 0);
    return;
  }
  pool->parallel_for(
      n_tasks, [&](int64_t task, int thread) { job.rows(task * chunk, std::min(n_out, (task + 1) * chunk), thread); });
}

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act, std::span<Q8Block> act_scratch) {
  if (act == Activations::F32 || !has_int8_dot(w.type)) return matmul(w, x, y, n_tokens, scratch, pool, isa);
  const int64_t n_in = w.row_length();
  const int64_t n_out = w.n_rows();
  const int64_t n_blocks = n_in / 32;
  if (n_tokens < 0 || static_cast<int64_t>(x.size()) != n_tokens * n_in ||
      static_cast<int64_t>(y.size()) != n_tokens * n_out ||
      static_cast<int64_t>(act_scratch.size()) < q8_scratch_blocks(n_tokens, n_in) ||
      n_in % tensor_type_info(w.type).block_elems != 0) {
    throw std::invalid_argument("matmul: sizes do not match weight '" + w.name + "'");
  }
  const KernelTable& k = kernel_table(isa);
  if (n_tokens == 0 || n_out == 0) return;
  const auto quantize = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x.data() + t * n_in;
      k.quantize_q8_blocks(xt, act_scratch.data() + t * n_blocks, n_in);
    }
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
  // The f32 scratch, unused on this path, holds each thread's unpacked row tiles.
  const Int8MatmulJob job{w.type,
                          w.data.data(),
                          w.stride_bytes(),
                          act_scratch.data(),
                          y.data(),
                          n_tokens,
                          n_blocks,
                          n_out,
                          k,
                          reinterpret_cast<std::byte*>(scratch.data()),
                          scratch.size() / static_cast<size_t>(n_threads) * sizeof(float)};
  const int64_t chunk = rows_per_task(n_out, n_threads);
  const int64_t n_tasks = (n_out + chunk - 1) / chunk;
  if (!pool || n_tasks == 1 || n_out * n_in * n_tokens < kMinParallelMacs) {
    job.rows(0, n_out, 0);
    return;
  }
  pool->parallel_for(
      n_tasks, [&](int64_t task, int thread) { job.rows(task * chunk, std::min(n_out, (task + 1) * chunk), thread); });
}

void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> row_scratch) {
  matmul(w, x, y, n_tokens, row_scratch, nullptr, active_isa());
}

}  // namespace peregrine
