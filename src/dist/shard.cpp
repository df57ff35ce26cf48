#include "dist/shard.h"

#include <algorithm>

#include "util/error.h"

namespace peregrine::dist {
namespace {

ModelSlice slice_for(const ModelFile& file, const GridPlace& place) {
  return grid_slice(ModelConfig::from_model_file(file), place);
}

}  // namespace

Shard::Shard(ModelFile file, std::shared_ptr<ExecutionContext> context, GridPlace place, Communicator& world,
             int group)
    : world_(world),
      place_(place),
      tp_(world.split(group >= 0 ? group : place.stage, place.tp_rank)),
      model_(file, std::move(context), slice_for(file, place)) {
  if (place_.tp > 1) model_.set_all_reduce([this](std::span<float> x) { tp_->all_reduce_sum(x); });
  if (model_.shape().expert_split) {
    model_.set_all_to_all([this](std::span<const float> send, std::span<const int64_t> send_counts,
                                 std::span<float> recv, std::span<const int64_t> recv_counts) {
      // Counts in floats to counts in bytes.
      byte_counts_.resize(2 * send_counts.size());
      for (size_t r = 0; r < send_counts.size(); ++r) {
        byte_counts_[r] = send_counts[r] * static_cast<int64_t>(sizeof(float));
        byte_counts_[send_counts.size() + r] = recv_counts[r] * static_cast<int64_t>(sizeof(float));
      }
      const std::span<const int64_t> counts(byte_counts_);
      tp_->all_to_all_v(std::as_bytes(send), counts.first(send_counts.size()), std::as_writable_bytes(recv),
                        counts.subspan(send_counts.size()));
    });
  }
  const int64_t n_vocab = model_.config().n_vocab;
  for (int r = 0; r <= place_.tp; ++r) {
    vocab_begin_.push_back(r == place_.tp ? n_vocab
                                          : resolve_slice(model_.config(), {0, -1, r, place_.tp, place_.ep}).vocab_begin);
  }
}

void Shard::finish_sends() {
  if (hidden_send_) hidden_send_->wait();
  if (logits_send_) logits_send_->wait();
  hidden_send_.reset();
  logits_send_.reset();
}

void Shard::run_stage(const Batch& batch, KvCache& kv) {
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t dim = model_.config().dim;
  // Each buffer's previous send must be done before it is overwritten (hidden_ now, local_logits_
  // just before the head runs), so a later stage is never held up by a rank 0 still computing.
  if (hidden_send_) hidden_send_->wait();
  hidden_send_.reset();
  if (!place_.first_stage()) {
    hidden_.resize(static_cast<size_t>(n * dim));
    world_.recv_values(std::span<float>(hidden_), place_.world_rank(place_.stage - 1, place_.tp_rank), kTagHidden);
  }
  model_.forward_layers(batch, kv, place_.first_stage() ? std::span<const float>() : std::span<const float>(hidden_));
  if (!place_.last_stage()) {
    model_.copy_hidden(hidden_);
    hidden_send_ = world_.start_send(std::as_bytes(std::span<const float>(hidden_)),
                                     place_.world_rank(place_.stage + 1, place_.tp_rank), kTagHidden);
    return;
  }
  if (logits_send_) logits_send_->wait();
  logits_send_.reset();
  model_.compute_logits(batch, local_logits_);
  if (world_.rank() != 0) logits_send_ = world_.start_send(std::as_bytes(std::span<const float>(local_logits_)), 0, kTagLogits);
}

void Shard::execute(const Batch& batch, KvCache& kv, std::vector<float>* logits) {
  run_stage(batch, kv);
  if (world_.rank() == 0) {
    const auto rows = static_cast<int64_t>(
        std::count_if(batch.want_logits.begin(), batch.want_logits.end(), [](uint8_t w) { return w != 0; }));
    gather_logits(rows, *logits);
  }
}

// Rank 0 puts the last stage's vocabulary slices together: rank j's [rows][v_j] becomes columns
// [vocab_begin_j, vocab_begin_j+1) of every row.
void Shard::gather_logits(int64_t rows, std::vector<float>& logits) {
  const int64_t n_vocab = model_.config().n_vocab;
  logits.resize(static_cast<size_t>(rows * n_vocab));
  for (int j = 0; j < place_.tp; ++j) {
    const int64_t begin = vocab_begin_[static_cast<size_t>(j)], width = vocab_begin_[static_cast<size_t>(j) + 1] - begin;
    const int source = place_.world_rank(place_.pp - 1, j);
    const float* part = local_logits_.data();
    if (source != 0) {
      part_.resize(static_cast<size_t>(rows * width));
      world_.recv_values(std::span<float>(part_), source, kTagLogits);
      part = part_.data();
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(part + r * width, width, logits.begin() + r * n_vocab + begin);
    }
  }
}

}  // namespace peregrine::dist
