// The probes `peregrine bench` divides by: they must return physically plausible, finite rates
// for every ISA this machine has (a zero, NaN or absurd value would make every "% of bound"
// meaningless). These are sanity ranges, not timings.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/isa.h"
#include "kernels/machine_probe.h"
#include "kernels/thread_pool.h"

namespace peregrine {
namespace {

TEST(MachineProbe, ReadBandwidthIsPlausible) {
  ThreadPool pool(2);
  const double bw = measure_read_bandwidth(pool, int64_t{64} << 20, 2);
  EXPECT_TRUE(std::isfinite(bw));
  EXPECT_GT(bw, 1e8);   // 0.1 GB/s: far below any machine that runs this
  EXPECT_LT(bw, 1e13);  // 10 TB/s: far above any CPU memory system
}

// bench prints the spread next to the bound: passes in order, every stream count plausible
// (3 streams leave a ragged tail the probe must still read).
TEST(MachineProbe, ReadBandwidthSpreadIsOrderedForEveryStreamCount) {
  ThreadPool pool(2);
  for (int streams : {1, 3, 4, 8}) {
    const BandwidthProbe p = probe_read_bandwidth(pool, (int64_t{48} << 20) + 8 * 13, 4, streams);
    EXPECT_EQ(p.passes, 4);
    EXPECT_LE(p.worst, p.median) << streams;
    EXPECT_LE(p.median, p.best) << streams;
    EXPECT_GT(p.worst, 1e8) << streams;
    EXPECT_LT(p.best, 1e13) << streams;
  }
}

TEST(MachineProbe, PeakRatesArePlausibleForEveryIsa) {
  ThreadPool pool(2);
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    const double flops = measure_peak_flops(pool, isa, 2);
    EXPECT_TRUE(std::isfinite(flops));
    EXPECT_GT(flops, 1e8);
    EXPECT_LT(flops, 1e14);
    if (isa == Isa::Scalar) continue;  // no integer roof there
    const double int8_ops = measure_peak_int8_ops(pool, isa, 2);
    EXPECT_TRUE(std::isfinite(int8_ops));
    EXPECT_GT(int8_ops, 1e8) << isa_name(isa);
    EXPECT_LT(int8_ops, 1e15) << isa_name(isa);
  }
}

}  // namespace
}  // namespace peregrine
