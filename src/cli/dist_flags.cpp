#include "cli/dist_flags.h"

#include <algorithm>

#include "kernels/thread_pool.h"
#include "util/error.h"

namespace peregrine::cli {

void DistFlags::add_to(ArgParser& p) {
  p.option("--tp", &tp, "T", "tensor-parallel ranks: launch with mpirun -np T*P", 1, 4096);
  p.option("--pp", &pp, "P", "pipeline stages (layer ranges), one rank each per tensor-parallel slice", 1, 4096);
  p.flag("--ep", &ep, "spread a mixture-of-experts model's experts over the tensor-parallel ranks");
  p.option("--disaggregate", &disaggregate, "PREFILL:DECODE", "separate pools of ranks for prefill and decode");
  p.option("--rank-timeout", &rank_timeout_s, "SECONDS",
           "a rank silent this long (dead or hung) fails the job with an error on rank 0", 1, 86400);
}

dist::Layout DistFlags::layout() const {
  dist::Layout l;
  l.tp = static_cast<int>(tp);
  l.pp = static_cast<int>(pp);
  l.ep = ep;
  if (disaggregate) {
    if (tp != 1 || pp != 1) throw UsageError("--disaggregate sizes its pools itself: drop --tp / --pp");
    dist::parse_disaggregate(*disaggregate, l);
  }
  return l;
}

namespace {

// Every rank parses the same flags and finds the same problem: only rank 0 reports it.
template <class F>
auto reported_by_rank0(F&& f) {
  try {
    return f();
  } catch (const UsageError&) {
    if (dist::detect_launch().rank != 0) throw dist::QuietExit{};
    throw;
  }
}

}  // namespace

std::unique_ptr<dist::DistSession> DistFlags::start(const std::string& command) const {
  const dist::Layout l = reported_by_rank0([&] { return layout(); });
  return std::make_unique<dist::DistSession>(l, command,
                                             std::chrono::milliseconds(static_cast<int64_t>(rank_timeout_s * 1000)));
}

void DistFlags::check_spec(const SpecFlags& spec) const {
  reported_by_rank0([&] {
    if (layout().disaggregated() && spec.enabled()) {
      throw UsageError("speculative decoding does not combine with --disaggregate (the decode rank verifies one "
                       "token per step)");
    }
    if (layout().distributed() && spec.enabled() && spec.proposer_name() == "heads") {
      throw UsageError("--spec heads needs the whole model in one process (its heads read the output matrix); "
                       "use --spec draft or --spec ngram with " + layout().describe());
    }
    return 0;
  });
}

int64_t default_threads() {
  const int local = dist::detect_launch().local_size;
  return std::max<int64_t>(1, physical_core_count() / std::max(1, local));
}

}  // namespace peregrine::cli
