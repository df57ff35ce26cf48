#pragma once
// Measurements of what this machine allows: the bounds `peregrine bench` and `roofline` report
// against. Both run on as many dedicated threads as the pool has, all started together.
#include <cstdint>

#include "kernels/isa.h"
#include "kernels/thread_pool.h"

namespace peregrine {

// Sustained read bandwidth from memory, bytes/s, over `reps` passes: the best pass is the bound
// (what the machine gave when nothing else got in the way); the median and worst say how much it
// moved from pass to pass, so a "% of bound" can be read with its uncertainty.
struct BandwidthProbe {
  double best = 0, median = 0, worst = 0;
  int passes = 0;
};
// Each pass reads a `bytes`-long buffer (far larger than the last-level cache) split among the
// pool's threads, each thread pinned to its own CPU (when the process may use that many) and
// reading its share as `streams` interleaved sequential streams, so that enough cache-line misses
// are in flight to fill the memory system (one stream per core leaves bandwidth unused).
BandwidthProbe probe_read_bandwidth(ThreadPool& pool, int64_t bytes = int64_t{512} << 20, int reps = 12,
                                    int streams = 4);
// probe_read_bandwidth(...).best.
double measure_read_bandwidth(ThreadPool& pool, int64_t bytes = int64_t{512} << 20, int reps = 12);

// Peak f32 multiply-add rate in flops/s (one FMA = 2 flops) on `isa` with register-resident
// data, best of `reps` short runs (so one quiet moment on a loaded machine is enough), all the
// pool's threads.
double measure_peak_flops(ThreadPool& pool, Isa isa, int reps = 20);

// Peak 8-bit multiply-add rate in ops/s (one multiply-add = 2 ops, like flops) of the integer
// dot-product step the integer kernels use (int8_dot.h): vpmaddubsw, vpmaddwd, vpaddd on AVX2;
// vpdpbusd on zmm on AVX-512 VNNI, about twice as many per cycle. Best of `reps` runs. 0 on the
// scalar path, which has no integer kernel worth a roof.
double measure_peak_int8_ops(ThreadPool& pool, Isa isa, int reps = 20);

// Peak bf16 multiply-add rate in flops/s (vdpbf16ps on zmm: 32 multiply-adds each), the arithmetic
// of F16/BF16 weights under Q8 activations where the CPU has AVX512-BF16 (matmul.h
// uses_bf16_dot). Best of `reps` runs; 0 where `isa` has no bf16 path.
double measure_peak_bf16_flops(ThreadPool& pool, Isa isa, int reps = 20);

}  // namespace peregrine
