#pragma once
// How a job's processes share the model: a grid of tensor-parallel ranks (T, the fast axis) by
// pipeline stages (P), optionally as two pools (disaggregated prefill and decode, each pool a
// tensor-parallel group of its own), and how this process was launched.
#include <cstdint>
#include <optional>
#include <string>

#include "kv/kv_type.h"
#include "model/config.h"
#include "model/model_slice.h"

namespace peregrine::dist {

struct Layout {
  int tp = 1;                // tensor-parallel ranks per stage
  int pp = 1;                // pipeline stages
  bool ep = false;           // experts spread over the tensor-parallel ranks (MoE models)
  // --disaggregate PREFILL:DECODE (0: prefill and decode share ranks). World ranks [0, DECODE) are
  // the decode pool, led by rank 0 (which runs the engine and so never waits for a prompt), and
  // [DECODE, DECODE + PREFILL) the prefill pool.
  int prefill_ranks = 0;
  int decode_ranks = 0;

  bool disaggregated() const { return prefill_ranks > 0; }
  bool in_decode_pool(int world_rank) const { return world_rank < decode_ranks; }
  int prefill_rank(int i) const { return decode_ranks + i; }  // world rank of the prefill pool's rank i
  int ranks() const { return disaggregated() ? prefill_ranks + decode_ranks : tp * pp; }
  bool distributed() const { return ranks() > 1; }
  std::string describe() const;  // "--tp 2 --pp 1" / "--disaggregate 1:1"
};

// Parses PREFILL:DECODE ("1:1"): positive rank counts. Throws UsageError.
void parse_disaggregate(const std::string& text, Layout& layout);

// One rank's place in a T x P grid: world rank = stage * T + tp_rank.
struct GridPlace {
  int tp = 1, pp = 1;
  int stage = 0, tp_rank = 0;
  bool ep = false;  // a mixture of experts' experts spread over the stage's tp ranks

  int world_rank(int stage_, int tp_rank_) const { return stage_ * tp + tp_rank_; }
  bool first_stage() const { return stage == 0; }
  SplitGrid grid() const { return {tp, pp, ep ? tp : 0}; }
  bool last_stage() const { return stage == pp - 1; }
};
GridPlace grid_place(int tp, int pp, int rank, bool ep = false);

// The slice a grid place holds (model_slice.h's stage_slice): layers [s * L / P, (s + 1) * L / P)
// and tensor-parallel rank tp_rank of tp. Throws UsageError when the model has fewer layers than
// stages.
ModelSlice grid_slice(const ModelConfig& config, const GridPlace& place);

// The largest KV cache shard any rank of `layout` keeps per token: its KV heads (a tensor-parallel
// share, or one replicated head) and the most layers a stage has. The whole model's for one process.
KvShape largest_shard_kv(const ModelConfig& config, const Layout& layout);

// What the launcher (mpirun, srun) told this process through its environment.
struct LaunchEnv {
  bool launched = false;  // started by an MPI launcher
  int rank = 0, size = 1;
  int local_size = 1;     // processes of this job on this machine
};
LaunchEnv detect_launch();

// Checks `layout` against how the job was launched; throws UsageError with the command to run
// when they disagree (a layout of N ranks not started by mpirun -np N, or the reverse).
void check_launch(const Layout& layout, const LaunchEnv& env, const std::string& command);

}  // namespace peregrine::dist
