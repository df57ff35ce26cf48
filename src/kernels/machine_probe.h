#pragma once
// Measurements of what this machine allows: the bounds `peregrine bench` and `roofline` report
// against. Both run on as many dedicated threads as the pool has, all started together.
#include <cstdint>

#include "kernels/isa.h"
#include "kernels/thread_pool.h"

namespace peregrine {

// Sustained read bandwidth from memory in bytes/s: best of `reps` passes over a `bytes`-long
// buffer (far larger than the last-level cache), split among the pool's threads.
double measure_read_bandwidth(ThreadPool& pool, int64_t bytes = int64_t{512} << 20, int reps = 5);

// Peak f32 multiply-add rate in flops/s (one FMA = 2 flops) on `isa` with register-resident
// data, best of `reps` short runs (so one quiet moment on a loaded machine is enough), all the
// pool's threads.
double measure_peak_flops(ThreadPool& pool, Isa isa, int reps = 20);

// Peak 8-bit multiply-add rate in ops/s (one multiply-add = 2 ops, like flops) of the integer
// dot-product step the integer kernels use (int8_dot.h): vpmaddubsw, vpmaddwd, vpaddd on AVX2;
// vpdpbusd on zmm on AVX-512 VNNI, about twice as many per cycle. Best of `reps` runs. 0 on the
// scalar path, which has no integer kernel worth a roof.
double measure_peak_int8_ops(ThreadPool& pool, Isa isa, int reps = 20);

}  // namespace peregrine
