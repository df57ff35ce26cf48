#include "dist/layout.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>

#include "util/error.h"

namespace peregrine::dist {
namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != 0 || n < 0 || n > 1 << 20) return std::nullopt;
  return static_cast<int>(n);
}

}  // namespace

std::string Layout::describe() const {
  if (disaggregated()) {
    return "--disaggregate " + std::to_string(prefill_ranks) + ":" + std::to_string(decode_ranks);
  }
  return "--tp " + std::to_string(tp) + " --pp " + std::to_string(pp) + (ep ? " --ep" : "");
}

void parse_disaggregate(const std::string& text, Layout& layout) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& part) {
    char* end = nullptr;
    const long n = part.empty() ? 0 : std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != 0 || n < 1 || n > 4096) {
      throw UsageError("--disaggregate: '" + text + "' is not PREFILL:DECODE with positive rank counts (e.g. 1:1)");
    }
    return static_cast<int>(n);
  };
  if (colon == std::string::npos) number("");
  layout.prefill_ranks = number(text.substr(0, colon));
  layout.decode_ranks = number(text.substr(colon + 1));
}

GridPlace grid_place(int tp, int pp, int rank, bool ep) {
  GridPlace g;
  g.ep = ep;
  g.tp = tp;
  g.pp = pp;
  g.stage = rank / tp;
  g.tp_rank = rank % tp;
  return g;
}

ModelSlice grid_slice(const ModelConfig& config, const GridPlace& place) {
  return stage_slice(config.n_layers, place.grid(), place.stage, place.tp_rank);
}

KvShape largest_shard_kv(const ModelConfig& config, const Layout& layout) {
  if (!layout.distributed()) return config.kv_shape();
  if (layout.disaggregated()) {  // the smaller pool's ranks hold the most heads
    const int pool = std::min(layout.prefill_ranks, layout.decode_ranks);
    const SliceShape s = resolve_slice(config, {0, -1, 0, pool, layout.ep});
    return {config.n_layers, s.n_kv_heads(), config.head_dim};
  }
  const SliceShape s = resolve_slice(config, {0, -1, 0, layout.tp, layout.ep});
  const int64_t layers = (config.n_layers + layout.pp - 1) / layout.pp;
  return {std::max<int64_t>(1, layers), s.n_kv_heads(), config.head_dim};
}

LaunchEnv detect_launch() {
  LaunchEnv env;
  // Open MPI's mpirun, then the PMI variables of MPICH's hydra and Slurm.
  for (const auto& [size, rank, local] : {std::tuple{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                                     "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                          std::tuple{"PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"}}) {
    const auto n = env_int(size), r = env_int(rank);
    if (n && r) {
      env.launched = true;
      env.size = *n;
      env.rank = *r;
      env.local_size = env_int(local).value_or(1);
      break;
    }
  }
  return env;
}

void check_launch(const Layout& layout, const LaunchEnv& env, const std::string& command) {
  const int want = layout.ranks();
  if (!env.launched) {
    if (want > 1) {
      throw UsageError(layout.describe() + " runs on " + std::to_string(want) +
                       " processes: launch it with mpirun -np " + std::to_string(want) + " peregrine " + command +
                       " ... (as root add --allow-run-as-root; more processes than cores: --oversubscribe)");
    }
    return;
  }
  if (env.size != want) {
    throw UsageError("launched as " + std::to_string(env.size) + " processes, but " + layout.describe() + " needs " +
                     std::to_string(want) + (want == 1 ? " (give --tp/--pp/--disaggregate for several)" : "") +
                     ": use mpirun -np " + std::to_string(want));
  }
}

}  // namespace peregrine::dist
