// Binding a Model's weights: every tensor checked against the config's shape and type, then cut
// to the model's slice (model_slice.h) as zero-copy views of the mapped file (a tensor-parallel
// rank's column slices excepted: contiguous_copy says why).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "kernels/bf16_pack.h"
#include "kernels/int8_layout.h"
#include "model/model.h"
#include "util/error.h"

namespace peregrine {
namespace {

class Binder {
 public:
  explicit Binder(const ModelFile& file) : file_(file) {}

  // A tensor of exactly `shape` whose rows can be dequantized (row length a multiple of the
  // type's block size).
  TensorView tensor(const std::string& name, std::vector<int64_t> shape) const {
    const TensorView* t = file_.find(name);
    if (!t) throw FormatError(file_.path + ": missing tensor '" + name + "'");
    if (t->shape != shape) throw FormatError(file_.shape_error(name, shape));
    const auto& info = tensor_type_info(t->type);
    if (t->row_length() % info.block_elems != 0) {
      throw FormatError(file_.path + ": tensor '" + name + "' rows of " + std::to_string(t->row_length()) +
                        " elements are not a multiple of the " + std::string(info.name) + " block size " +
                        std::to_string(info.block_elems));
    }
    if (t->data.size() != tensor_bytes(t->type, t->n_elements())) {
      throw FormatError(file_.path + ": tensor '" + name + "' data size does not match its shape");
    }
    return *t;
  }

  // Elements [begin, end) of a 1-D tensor of length n, dequantized to f32 (norm weights and
  // biases are tiny).
  std::vector<float> vector(const std::string& name, int64_t n, int64_t begin = 0, int64_t end = -1) const {
    TensorView t = tensor(name, {n});
    std::vector<float> all(static_cast<size_t>(n));
    t.dequantize_row_to(0, all);
    return {all.begin() + begin, all.begin() + (end < 0 ? n : end)};
  }

  // The largest block size among the tensors named, for cuts of their input columns.
  int64_t column_block(std::initializer_list<std::string> names) const {
    int64_t block = 1;
    for (const auto& name : names) {
      if (const TensorView* t = file_.find(name)) block = std::max(block, tensor_type_info(t->type).block_elems);
    }
    return block;
  }

 private:
  const ModelFile& file_;
};

}  // namespace

Model::Model(ModelFile file, std::shared_ptr<ExecutionContext> context, ModelSlice slice)
    : file_(std::move(file)), config_(ModelConfig::from_model_file(file_)), slice_(slice), ctx_(std::move(context)) {
  if (!ctx_) throw UsageError("model: no execution context");
  const Binder bind(file_);
  int64_t column_block = 1;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    column_block = std::max(column_block, bind.column_block({p + "attn_output.weight", p + "ffn_down.weight"}));
  }
  shape_ = resolve_slice(config_, slice_, column_block);
  rope_.style = config_.rope_style;
  rope_.rope_dim = config_.rope_dim;
  rope_.freq_base = config_.rope_freq_base;
  rope_.freq_scale = config_.rope_freq_scale;
  rope_.freq_factors = config_.rope_freq_factors;
  rope_swa_ = rope_;
  if (config_.rope_freq_base_swa > 0.f) {
    rope_swa_.freq_base = config_.rope_freq_base_swa;
    rope_swa_.freq_scale = 1.f;
  }
  bind_weights();
  convert_to_kernel_types();
}

void Model::bind_weights() {
  const ModelConfig& c = config_;
  const SliceShape& sh = shape_;
  const Binder bind(file_);
  const int64_t hd = c.head_dim;
  const int64_t q0 = sh.head_begin * hd, q1 = sh.head_end * hd;
  const int64_t k0 = sh.kv_head_begin * hd, k1 = sh.kv_head_end * hd;
  // The embedding is read by the first stage; the head by the last (tied: the same matrix).
  const TensorView embd = bind.tensor("token_embd.weight", {c.dim, c.n_vocab});
  if (sh.first_stage) token_embd_ = embd;
  if (sh.last_stage) {
    const TensorView out = c.tied_output ? embd : bind.tensor("output.weight", {c.dim, c.n_vocab});
    output_ = sh.tensor_split ? out.rows(sh.vocab_begin, sh.vocab_end) : out;
    output_norm_ = bind.vector("output_norm.weight", c.dim);
  }
  layers_.resize(static_cast<size_t>(sh.n_layers()));
  for (int64_t l = sh.layer_begin; l < sh.layer_end; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = layers_[static_cast<size_t>(l - sh.layer_begin)];
    L.attn_norm = bind.vector(p + "attn_norm.weight", c.dim);
    if (c.fused_qkv) {  // rows q | k | v: this slice's heads of each are three row ranges of one matrix
      const TensorView qkv = bind.tensor(p + "attn_qkv.weight", {c.dim, c.q_dim() + 2 * c.kv_dim()});
      L.wq = qkv.rows(q0, q1);
      L.wk = qkv.rows(c.q_dim() + k0, c.q_dim() + k1);
      L.wv = qkv.rows(c.q_dim() + c.kv_dim() + k0, c.q_dim() + c.kv_dim() + k1);
    } else {
      L.wq = bind.tensor(p + "attn_q.weight", {c.dim, c.q_dim()}).rows(q0, q1);
      L.wk = bind.tensor(p + "attn_k.weight", {c.dim, c.kv_dim()}).rows(k0, k1);
      L.wv = bind.tensor(p + "attn_v.weight", {c.dim, c.kv_dim()}).rows(k0, k1);
    }
    const TensorView wo = bind.tensor(p + "attn_output.weight", {c.q_dim(), c.dim});
    L.wo = sh.tensor_split ? contiguous_copy(wo.columns(q0, q1)) : wo;
    if (c.qkv_bias) {
      L.q_bias = bind.vector(p + "attn_q.bias", c.q_dim(), q0, q1);
      L.k_bias = bind.vector(p + "attn_k.bias", c.kv_dim(), k0, k1);
      L.v_bias = bind.vector(p + "attn_v.bias", c.kv_dim(), k0, k1);
    }
    if (c.qk_norm) {
      L.q_norm = bind.vector(p + "attn_q_norm.weight", hd);
      L.k_norm = bind.vector(p + "attn_k_norm.weight", hd);
    }
    L.ffn_norm = bind.vector(p + "ffn_norm.weight", c.dim);
    if (c.post_norms) {
      L.post_attn_norm = bind.vector(p + "post_attention_norm.weight", c.dim);
      L.post_ffn_norm = bind.vector(p + "post_ffw_norm.weight", c.dim);
    }
    if (c.is_moe()) {
      bind_moe(L, p);
      continue;
    }
    if (c.fused_gate_up) {  // rows gate | up (llama.cpp's swiglu: silu of the first half times the second)
      const TensorView gate_up = bind.tensor(p + "ffn_up.weight", {c.dim, 2 * c.ffn_dim});
      L.w_gate = gate_up.rows(sh.ffn_begin, sh.ffn_end);
      L.w_up = gate_up.rows(c.ffn_dim + sh.ffn_begin, c.ffn_dim + sh.ffn_end);
    } else {
      L.w_gate = bind.tensor(p + "ffn_gate.weight", {c.dim, c.ffn_dim}).rows(sh.ffn_begin, sh.ffn_end);
      L.w_up = bind.tensor(p + "ffn_up.weight", {c.dim, c.ffn_dim}).rows(sh.ffn_begin, sh.ffn_end);
    }
    const TensorView down = bind.tensor(p + "ffn_down.weight", {c.ffn_dim, c.dim});
    L.w_down = sh.tensor_split ? contiguous_copy(down.columns(sh.ffn_begin, sh.ffn_end)) : down;
  }
}

// A tensor-parallel rank's column slice of wo / w_down, copied once into memory of its own with
// the rows back to back. Read in place, each row's slice sits between the other ranks' parts, and
// the hardware prefetchers fetch those gaps too: a decode step read up to twice these matrices'
// share of bytes. The copy is the rank's share only (the rest of the file is still never read).
TensorView Model::contiguous_copy(const TensorView& slice) {
  const size_t row = slice.row_bytes(), n = static_cast<size_t>(slice.n_rows());
  constexpr size_t kAlign = 64;  // a cache line, as the mapped file's tensors are aligned
  std::vector<std::byte>& buf = owned_weights_.emplace_back(n * row + kAlign);
  const size_t pad = (kAlign - reinterpret_cast<std::uintptr_t>(buf.data()) % kAlign) % kAlign;
  const std::span<std::byte> out(buf.data() + pad, n * row);
  for (size_t r = 0; r < n; ++r) std::memcpy(out.data() + r * row, slice.row(static_cast<int64_t>(r)), row);
  TensorView v = slice;
  v.data = out;
  v.row_stride = 0;
  return v;
}

// `bytes` of memory the model owns (owned_weights_), in 2 MiB pages as the file's own copy is
// (format/mapped_file.h: decode streams every weight once per token, and 4 KiB pages stop the
// prefetchers at every boundary): the buffer is advised before its first touch, so the faults of
// resize() take huge pages. Aligned to 2 MiB.
std::span<std::byte> Model::owned_huge_pages(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  std::vector<std::byte>& buf = owned_weights_.emplace_back();
  buf.reserve(bytes + kHugePage);
  const auto at = reinterpret_cast<std::uintptr_t>(buf.data());
  const size_t pad = (kHugePage - at % kHugePage) % kHugePage;
  ::madvise(buf.data() + pad, bytes, MADV_HUGEPAGE);  // advice only: without huge pages it still works
  buf.resize(bytes + kHugePage);
  return {buf.data() + pad, bytes};
}

// The matrix as the context's kernels read it, prepared once here at load: a 2-D matrix in an
// interleaved int8 layout (interleaved_copy), or with its bf16 packed copy beside it
// (ExecutionContext::packs_bf16_groups: the CPU's bf16 path; TensorView::bf16_groups, every other
// reader keeps the rows as stored); otherwise a copy of its own in the type the kernels read
// (ExecutionContext::matmul_weight_type: F16 rows to BF16, which the bf16 kernels otherwise
// convert on every read, with the same bits), or w itself.
TensorView Model::in_kernel_type(const TensorView& w) {
  if (w.data.empty()) return w;
  const int64_t n = w.row_length(), rows = w.n_rows();
  if (w.shape.size() == 2 && is_interleaved_type(ctx_->matmul_weight_type(w.type))) {
    return interleaved_copy(w, ctx_->matmul_weight_type(w.type));
  }
  if (w.shape.size() == 2 && ctx_->packs_bf16_groups(w.type)) {
    const std::span<std::byte> out = owned_huge_pages(bf16_groups_bytes(rows, n));
    pack_bf16_groups(w.type, w.data.data(), w.stride_bytes(), rows, n, out.data());
    TensorView v = w;
    v.bf16_groups = out;
    return v;
  }
  if (w.type != TensorType::F16 || ctx_->matmul_weight_type(w.type) != TensorType::BF16) return w;
  const size_t row = static_cast<size_t>(n) * sizeof(uint16_t);
  const std::span<std::byte> buf = owned_huge_pages(static_cast<size_t>(rows) * row);
  auto* out = reinterpret_cast<uint16_t*>(buf.data());
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* src = w.row(r);
    uint16_t* dst = out + r * n;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = fp32_to_bf16(fp16_to_fp32(h));
    }
  }
  TensorView v = w;
  v.type = TensorType::BF16;
  v.data = buf;
  v.row_stride = 0;
  return v;
}

// w's rows in an interleaved kernel layout (kernels/int8_layout.h), in a buffer of its own in 2
// MiB pages (owned_huge_pages). Only 2-D matrices: the stacked experts' kernels address each
// expert's rows, which a group may straddle.
TensorView Model::interleaved_copy(const TensorView& w, TensorType layout) {
  const int64_t n = w.row_length(), rows = w.n_rows();
  const std::span<std::byte> out = owned_huge_pages(interleaved_bytes(layout, rows, n));
  interleave_rows(layout, w.row(0), w.stride_bytes(), rows, n, out.data());
  TensorView v = w;
  v.type = layout;
  v.data = out;
  v.row_stride = 0;
  return v;
}

// Every matrix the forward multiplies by, in its kernels' type (in_kernel_type).
void Model::convert_to_kernel_types() {
  if (!output_.data.empty()) output_ = in_kernel_type(output_);
  for (Layer& L : layers_) {
    for (TensorView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.gate_exps, &L.up_exps,
                          &L.down_exps, &L.shared_gate, &L.shared_up, &L.shared_down}) {
      *w = in_kernel_type(*w);
    }
  }
}

// The router and the stacked experts (llama.cpp's names and shapes), and qwen2moe's shared expert.
void Model::bind_moe(Layer& L, const std::string& p) {
  const ModelConfig& c = config_;
  const Binder bind(file_);
  const int64_t e = c.moe.n_experts(), ffe = c.moe.expert_ffn_dim;
  L.router = bind.tensor(p + "ffn_gate_inp.weight", {c.dim, e});
  const int64_t e0 = shape_.expert_begin, e1 = shape_.expert_end;  // this slice's experts
  L.gate_exps = bind.tensor(p + "ffn_gate_exps.weight", {c.dim, ffe, e}).matrices(e0, e1);
  L.up_exps = bind.tensor(p + "ffn_up_exps.weight", {c.dim, ffe, e}).matrices(e0, e1);
  L.down_exps = bind.tensor(p + "ffn_down_exps.weight", {ffe, c.dim, e}).matrices(e0, e1);
  if (c.moe.shared_ffn_dim == 0) return;
  const int64_t ffs = c.moe.shared_ffn_dim;
  L.shared_gate = bind.tensor(p + "ffn_gate_shexp.weight", {c.dim, ffs});
  L.shared_up = bind.tensor(p + "ffn_up_shexp.weight", {c.dim, ffs});
  L.shared_down = bind.tensor(p + "ffn_down_shexp.weight", {ffs, c.dim});
  L.shared_gate_inp = bind.tensor(p + "ffn_gate_inp_shexp.weight", {c.dim});
  L.shared_gate_inp.shape = {c.dim, 1};
}

}  // namespace peregrine
