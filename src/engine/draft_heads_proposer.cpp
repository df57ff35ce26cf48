#include "engine/draft_heads_proposer.h"

#include <algorithm>
#include <string>

#include "engine/proposal_sampler.h"
#include "util/error.h"

namespace peregrine {
namespace {

constexpr int64_t kMaxHeads = 32;

int64_t require_int(const ModelFile& f, const std::string& key) {
  const auto v = f.meta.get_int_opt(key);
  if (!v) throw FormatError(f.path + ": missing metadata key '" + key + "' (not a heads file?)");
  return *v;
}

}  // namespace

DraftHeadsProposer::DraftHeadsProposer(ModelFile heads, const Model& target, SampledProposals mode)
    : file_(std::move(heads)), target_(target), mode_(mode) {
  const std::string arch = file_.meta.get_string_opt("general.architecture").value_or("");
  if (arch != "medusa") {
    throw FormatError(file_.path + ": general.architecture is '" + arch + "', not 'medusa' (not a heads file)");
  }
  const int64_t n = require_int(file_, "medusa.head_count");
  const int64_t dim = require_int(file_, "medusa.embedding_length");
  const int64_t vocab = require_int(file_, "medusa.vocab_size");
  const ModelConfig& c = target.config();
  if (n < 1 || n > kMaxHeads) throw FormatError(file_.path + ": medusa.head_count " + std::to_string(n) + " is outside [1, 32]");
  if (dim != c.dim || vocab != c.n_vocab) {
    throw UsageError("heads " + file_.path + " were trained for a model of dim " + std::to_string(dim) + " and " +
                     std::to_string(vocab) + " tokens; the target has dim " + std::to_string(c.dim) + " and " +
                     std::to_string(c.n_vocab));
  }
  if (!target.shape().last_stage || target.shape().tensor_split) {
    throw UsageError("heads need the whole model's output matrix");
  }
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = "medusa." + std::to_string(i);
    const TensorView& w = file_.require(p + ".weight");
    const TensorView& b = file_.require(p + ".bias");
    if (w.shape != std::vector<int64_t>{dim, dim} || b.shape != std::vector<int64_t>{dim}) {
      throw FormatError(file_.path + ": " + p + " tensors do not have shapes {dim, dim} and {dim}");
    }
    Head h{w, std::vector<float>(static_cast<size_t>(dim))};
    b.dequantize_row_to(0, h.bias);
    heads_.push_back(std::move(h));
  }
}

void DraftHeadsProposer::on_commit(const Sequence& seq, std::span<const float> target_hidden) {
  if (target_hidden.empty()) {
    hidden_.erase(seq.seq_id());
  } else {
    hidden_[seq.seq_id()].assign(target_hidden.begin(), target_hidden.end());
  }
}

void DraftHeadsProposer::on_finish(const Sequence& seq) { hidden_.erase(seq.seq_id()); }

// Rows are (sequence, head) pairs, head-major, so each head's matrix is one matmul over all
// sequences and W_out one matmul over every row.
void DraftHeadsProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> max_tokens) {
  const int64_t dim = target_.config().dim, n_vocab = target_.config().n_vocab;
  std::vector<Sequence*> ready;
  std::vector<int64_t> want;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (hidden_.count(seqs[i]->seq_id()) == 0) continue;  // no target state yet: no proposal
    ready.push_back(seqs[i]);
    want.push_back(std::min<int64_t>(max_tokens[i], n_heads()));
  }
  const auto b = static_cast<int64_t>(ready.size());
  if (b == 0) return;
  const int64_t rows = b * n_heads();
  ExecutionContext& ctx = target_.context();
  h_host_.resize(static_cast<size_t>(b * dim));
  for (int64_t s = 0; s < b; ++s) {
    const auto& h = hidden_[ready[static_cast<size_t>(s)]->seq_id()];
    std::copy(h.begin(), h.end(), h_host_.begin() + s * dim);
  }
  const std::span<float> h = grow_buffer(ctx, h_, h_host_.size());
  const std::span<float> z = grow_buffer(ctx, z_, static_cast<size_t>(rows * dim));
  const std::span<float> y = grow_buffer(ctx, y_, static_cast<size_t>(rows * dim));
  const std::span<float> logits = grow_buffer(ctx, logits_, static_cast<size_t>(rows * n_vocab));
  ctx.copy_from_host(h_host_, h);
  for (int64_t i = 0; i < n_heads(); ++i) {
    const std::span<float> zi = z.subspan(static_cast<size_t>(i * b * dim), static_cast<size_t>(b * dim));
    const std::span<float> yi = y.subspan(static_cast<size_t>(i * b * dim), static_cast<size_t>(b * dim));
    ctx.matmul(heads_[static_cast<size_t>(i)].weight, h, zi, b);
    ctx.add_bias(zi, heads_[static_cast<size_t>(i)].bias, b);
    ctx.silu(zi);
    ctx.copy_from_host(h_host_, yi);  // y = h + SiLU(z)
    ctx.add(yi, zi);
  }
  ctx.matmul(target_.output_matrix(), y, logits, rows);
  logits_host_.resize(logits.size());
  ctx.copy_to_host(logits, logits_host_);
  ++passes_;
  for (int64_t s = 0; s < b; ++s) {
    ProposalSampler sampler(*ready[static_cast<size_t>(s)], mode_);
    for (int64_t i = 0; i < want[static_cast<size_t>(s)]; ++i) {
      sampler.next(std::span<const float>(logits_host_)
                       .subspan(static_cast<size_t>((i * b + s) * n_vocab), static_cast<size_t>(n_vocab)));
    }
  }
}

}  // namespace peregrine
