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

TEST(MachineProbe, PeakFlopsIsPlausibleForEveryIsa) {
  ThreadPool pool(2);
  for (Isa isa : {Isa::Scalar, Isa::Avx2}) {
    if (!isa_supported(isa)) continue;
    const double flops = measure_peak_flops(pool, isa, 2);
    EXPECT_TRUE(std::isfinite(flops));
    EXPECT_GT(flops, 1e8);
    EXPECT_LT(flops, 1e14);
  }
}

}  // namespace
}  // namespace peregrine
