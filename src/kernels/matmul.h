#pragma once
// Weight-times-activations products. Every output element is one dot product reduced in a fixed
// order that depends only on the row length and the ISA path, never on how many tokens share the
// call, how rows are split among threads, or the thread count, so a sequence's results are
// bit-identical whatever else is in the batch (see docs/performance-history.md, "Batch invariance").
#include <cstdint>
#include <span>

#include "format/model_file.h"
#include "kernels/int8_dot.h"
#include "kernels/isa.h"
#include "kernels/ops.h"

namespace peregrine {

class ThreadPool;

// a, b: [n]. Scalar path: eight interleaved partial sums (lane i takes elements i, i+8, ...),
// combined in a fixed tree, then the ragged tail in order.
float dot(const float* a, const float* b, int64_t n);
// The same product on the given path (the AVX2 order is described in simd_avx2.h).
float dot(const float* a, const float* b, int64_t n, Isa isa);

// Rows of weights each thread dequantizes at once in a batched matmul (kept in L2 and reused by
// every token of the batch).
inline constexpr int64_t kMatmulRowTile = 8;

// Scratch floats matmul needs for n_in-long rows on n_threads threads at full speed (less works
// down to n_threads * n_in, just slower).
inline int64_t matmul_scratch_floats(int64_t n_in, int64_t n_threads) { return n_threads * kMatmulRowTile * n_in; }

// y = x W^T for a batch of tokens.
// w: weight of GGUF shape {n_in, n_out} (n_out rows of n_in), any supported TensorType
// x: [n_tokens][n_in]
// y: [n_tokens][n_out]
// scratch: [>= pool size * n_in] floats (matmul_scratch_floats for full speed): dequantized rows
// pool: splits the output rows among its threads; nullptr = the calling thread alone
// A batch reads the weights once: each row is dequantized once and dotted with every token; a
// single token on the AVX2 path dots straight from the packed row (same result, bit for bit).
// Throws std::invalid_argument on mismatched sizes (a programming error).
void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> scratch, ThreadPool* pool, Isa isa);

// How activations meet weights of a has_int8_dot type (Q8_0, Q4_0, Q4_K, Q6_K) and, on CPUs with
// AVX512-BF16, of F16/BF16 type; other weight types always take the F32 path.
enum class Activations {
  F32,  // dequantize the weights and dot with f32 activations: exact up to f32 rounding
  Q8,   // round each token's activations to Q8 blocks once, then integer dot products
        // (int8_dot.h): llama.cpp's arithmetic, ~3x less work per weight byte. F16/BF16 weights
        // on a CPU with AVX512-BF16: activations rounded to bf16 once, then bf16 dot products
        // (uses_bf16_dot; x86/simd_avx512_bf16.h), ~2x the f32 rate; F16 weights round to bf16.
};

// Whether `type` weights meet bf16-rounded activations on this path and mode (the CPU has
// AVX512-BF16, act is Q8, type is F16 or BF16).
bool uses_bf16_dot(TensorType type, Isa isa, Activations act);

// The type the integer kernels of this path and mode read `stored` matrices in: an interleaved
// layout (int8_layout.h) made once at load where the path has kernels for one (AVX-512 under Q8
// activations: Q4_0 as Q4_0_X16, Q8_0 as Q8_0_X16), else stored. Opt-in for now
// (PEREGRINE_INT8_REPACK=1): decode gains, but 5-16 tokens per call lose (int8_layout.h).
TensorType int8_kernel_type(TensorType stored, Isa isa, Activations act);

// Activation scratch (in Q8Block units) matmul needs for n_tokens rows of n_in: the Q8 blocks of
// the integer path, then the bf16 rows of the bf16 path (64-byte aligned rows of n_in rounded up
// to 32 elements), so one group may mix both.
inline int64_t act_scratch_blocks(int64_t n_tokens, int64_t n_in) { return n_tokens * ((n_in + 31) / 32) * 3 + 2; }

// As above, with `act` choosing the arithmetic for has_int8_dot weights.
// act_scratch: [>= act_scratch_blocks(n_tokens, n_in)] when act == Q8 and has_int8_dot(w.type) or
// uses_bf16_dot, else unused.
// Batch invariance holds on both paths: a token's activations are rounded on their own.
void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act, std::span<Q8Block> act_scratch);

// One weight of a matmul_group and its output. w: GGUF shape {n_in, n_out}; y: [n_tokens][n_out]
struct MatmulTarget {
  const TensorView* w;
  std::span<float> y;
};
inline constexpr size_t kMaxMatmulGroup = 4;

// y_i = x W_i^T for up to kMaxMatmulGroup weights that share the input x (a layer's Q, K and V;
// gate and up): one meeting of the threads instead of one per weight, and x rounded to Q8 once.
// Each y_i gets the bits matmul(W_i) gives it; other arguments as for matmul. Rows are claimed in
// chunks that shrink towards the end of the call (few tokens), so threads finish together.
void matmul_group(std::span<const MatmulTarget> targets, std::span<const float> x, int64_t n_tokens,
                  std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act, std::span<Q8Block> act_scratch);

// gate.y = glu(x W_gate^T) * (x W_up^T), up.y = x W_up^T: a gated feed-forward's two products and
// its activation (ops.h apply_glu) in one meeting of the threads. Rows are claimed in chunks of
// both products, and the thread that computed a chunk applies the activation to those elements of
// every token while they are in its cache, so the activation runs on every thread, hidden behind
// the weight reads, instead of on the caller alone afterwards. Bits: those of matmul_group on
// {gate, up} followed by apply_glu. gate.w, up.w: same shape {n_in, ffn}; other arguments as for
// matmul_group.
void matmul_glu(const MatmulTarget& gate, const MatmulTarget& up, Glu glu, std::span<const float> x, int64_t n_tokens,
                std::span<float> scratch, ThreadPool* pool, Isa isa, Activations act, std::span<Q8Block> act_scratch);

// As above on active_isa(), one thread; row_scratch: [>= n_in] floats.
void matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n_tokens,
            std::span<float> row_scratch);

}  // namespace peregrine
