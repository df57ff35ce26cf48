#pragma once
// One rank's part of a tensor x pipeline parallel model (a GridPlace): its Model slice, its
// tensor-parallel group, and the step it runs for every batch. Rank 0 and the worker ranks run the
// same execute(), so every rank does exactly the same work in the same order.
//
// Per step, with T ranks per stage and P stages (world rank = stage * T + tp_rank):
//   stage 0 embeds; stage s > 0 receives the hidden states [n][dim] from rank (s - 1, tp_rank);
//   each layer: attention and feed-forward on the rank's heads / rows, an all-reduce of the
//   partial sums [n][dim] within the stage's T ranks after wo and after w_down; with expert
//   parallelism (--ep) a mixture-of-experts layer instead runs the rank's E / T experts and
//   exchanges their outputs within the stage (all-to-all-v; model/model_moe.cpp says how);
//   stage s < P - 1 sends its hidden states to rank (s + 1, tp_rank);
//   the last stage's ranks compute the logits of their vocabulary rows ([rows][vocab / T]) and
//   send them to world rank 0, which puts the rows together ([rows][n_vocab]).
#include <memory>
#include <vector>

#include "backend/execution_context.h"
#include "dist/communicator.h"
#include "dist/layout.h"
#include "dist/step_message.h"
#include "format/model_file.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/batch.h"

namespace peregrine::dist {

class Shard {
 public:
  // Collective over `world` (splits the tensor-parallel groups: the ranks of one stage, or with
  // `group` >= 0 the ranks passing the same group, e.g. a disaggregated pool). Throws UsageError
  // when the model cannot be cut this way (heads not divisible by T, fewer layers than stages, ...).
  Shard(ModelFile file, std::shared_ptr<ExecutionContext> context, GridPlace place, Communicator& world,
        int group = -1);

  Model& model() { return model_; }
  const GridPlace& place() const { return place_; }
  Communicator& world() { return world_; }
  Communicator& tp_group() { return *tp_; }

  // This rank's part of one step: its stage's layers (receiving the previous stage's hidden
  // states, handing its own on in the background), and on the last stage its logits rows, sent to
  // world rank 0 in the background.
  void run_stage(const Batch& batch, KvCache& kv);
  // World rank 0: the logits of a step ([rows][n_vocab]) from the last stage's ranks, in the
  // order steps were run.
  void gather_logits(int64_t rows, std::vector<float>& logits);
  // Both, for a step run at once (on world rank 0, `logits` gets the step's logits).
  void execute(const Batch& batch, KvCache& kv, std::vector<float>* logits);
  // Waits for the sends run_stage left in the background.
  void finish_sends();

  Communicator& world_;
  GridPlace place_;
  std::unique_ptr<Communicator> tp_;
  Model model_;
  std::vector<int64_t> vocab_begin_;  // [T + 1] the last stage's vocabulary cuts
  std::vector<float> hidden_, local_logits_, part_;
  std::vector<int64_t> byte_counts_;  // expert parallelism: the all-to-all's send then receive counts
  std::unique_ptr<PendingSend> hidden_send_, logits_send_;  // of hidden_ / local_logits_
};

}  // namespace peregrine::dist
