#include "cli/dist_flags.h"

#include <algorithm>
#include <vector>

#include "engine/proposer_registry.h"

#include "kernels/thread_pool.h"
#include "util/error.h"

namespace peregrine::cli {

void DistFlags::add_to(ArgParser& p) {
  p.option("--tp", &tp, "T", "tensor-parallel ranks: launch with mpirun -np T*P", 1, 4096);
  p.option("--pp", &pp, "P", "pipeline stages (layer ranges), one rank each per tensor-parallel slice", 1, 4096);
  p.flag("--ep", &ep, "spread a mixture-of-experts model's experts over the tensor-parallel ranks");
  p.option("--disaggregate", &disaggregate, "PREFILL:DECODE", "separate pools of ranks for prefill and decode");
  p.option("--rank-timeout", &rank_timeout_s, "SECONDS",
           "a rank without a heartbeat this long (dead, frozen or cut off) fails the job with an error on rank 0; "
           "a slow step is no failure",
           1, 86400);
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

namespace {

// "--spec draft or --spec ngram": the proposers `fits` allows.
template <class F>
std::string spec_choices(F&& fits) {
  std::vector<std::string> names;
  for (const ProposerEntry& e : proposer_registry()) {
    if (fits(e)) names.push_back("--spec " + std::string(e.name));
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

}  // namespace

void DistFlags::check_spec(const SpecFlags& spec) const {
  reported_by_rank0([&] {
    const ProposerEntry* p = spec.proposer();
    if (p == nullptr) return 0;
    const dist::Layout l = layout();
    if (l.disaggregated()) {
      throw UsageError("speculative decoding does not combine with --disaggregate (the decode rank verifies one "
                       "token per step)");
    }
    if (l.distributed() && p->needs.whole_model) {
      const auto on_layouts = [](const ProposerEntry& e) { return !e.needs.whole_model && !e.needs.hidden_state; };
      throw UsageError("--spec " + std::string(p->name) + " needs the whole model in one process (" +
                       std::string(p->needs.whole_model_why) + "); use " + spec_choices(on_layouts) + " with " +
                       l.describe());
    }
    if (l.pp > 1 && p->needs.hidden_state) {
      throw UsageError("--spec " + std::string(p->name) +
                       " reads the model's final hidden states, which the first pipeline stage does not hold; use " +
                       spec_choices([](const ProposerEntry& e) { return !e.needs.hidden_state; }) + " with " +
                       l.describe());
    }
    return 0;
  });
}

int64_t default_threads() {
  const int local = dist::detect_launch().local_size;
  return std::max<int64_t>(1, physical_core_count() / std::max(1, local));
}

}  // namespace peregrine::cli
