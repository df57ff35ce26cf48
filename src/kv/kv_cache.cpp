#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

#include "format/tensor_type.h"
#include "kv/kv_fp8.h"
#include "kv/kv_q4.h"
#include "kv/kv_q8.h"
#include "util/error.h"

namespace peregrine {
namespace {

// Keeps a mistyped flag from asking for terabytes: 64 GiB of cache is beyond this engine's scope.
constexpr double kMaxCacheBytes = 64.0 * 1024 * 1024 * 1024;

int64_t blocks_for(int64_t n_tokens, int64_t block_size) { return (n_tokens + block_size - 1) / block_size; }

}  // namespace

KvCache::KvCache(const KvShape& shape, KvType type, int64_t n_blocks, int32_t block_size)
    : type_(type),
      n_blocks_(n_blocks),
      block_size_(block_size),
      n_layers_(shape.n_layers),
      n_kv_heads_(shape.n_kv_heads),
      head_dim_(shape.head_dim),
      row_elems_(shape.n_kv_heads * shape.head_dim),
      scale_group_(kv_scale_group(type, shape.head_dim)) {
  if (n_blocks < 1 || n_blocks > std::numeric_limits<BlockId>::max()) {
    throw UsageError("KV cache: block count " + std::to_string(n_blocks) + " is out of range");
  }
  if (block_size < 1 || block_size > 65536) {
    throw UsageError("KV cache: block size " + std::to_string(block_size) + " is out of range [1, 65536]");
  }
  if (n_layers_ < 1 || n_kv_heads_ < 1 || head_dim_ < 1) {
    throw UsageError("KV cache: model config has no layers / KV heads / head dimension");
  }
  if (!kv_type_supports_head_dim(type, head_dim_)) {
    throw UsageError("KV cache: type " + std::string(kv_type_name(type)) + " needs an even head dimension; this model's is " +
                     std::to_string(head_dim_) + " (use --kv-type f16)");
  }
  const double total = 2.0 * static_cast<double>(n_layers_) * static_cast<double>(n_blocks) *
                       static_cast<double>(block_size) * static_cast<double>(n_kv_heads_) *
                       static_cast<double>(kv_row_bytes(type, head_dim_));
  if (total > kMaxCacheBytes) {
    throw UsageError("KV cache: " + std::to_string(n_blocks) + " blocks of " + std::to_string(block_size) +
                     " tokens would need " + std::to_string(total / (1024.0 * 1024 * 1024)) +
                     " GiB, over the 64 GiB limit");
  }
  const size_t elems = static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size) * static_cast<size_t>(row_elems_);
  layers_.resize(static_cast<size_t>(n_layers_));
  for (auto& l : layers_) {
    switch (type_) {
      case KvType::F32:
        l.k32.assign(elems, 0.f);
        l.v32.assign(elems, 0.f);
        break;
      case KvType::F16:
      case KvType::BF16:
        l.k16.assign(elems, 0);
        l.v16.assign(elems, 0);
        break;
      case KvType::Q8_0:
      case KvType::FP8_E4M3:
      case KvType::Q4_0: {
        const size_t bytes = kv_value_byte(type_, elems), scales = elems / static_cast<size_t>(scale_group_);
        l.kq.assign(bytes, type_ == KvType::Q4_0 ? 0x88 : 0);  // Q4_0: nibbles of 8 are zeros
        l.vq.assign(bytes, type_ == KvType::Q4_0 ? 0x88 : 0);
        l.ks.assign(scales, 0);
        l.vs.assign(scales, 0);
        break;
      }
    }
  }
  refs_.assign(static_cast<size_t>(n_blocks), 0);
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));
}

bool KvCache::reserve(SeqId seq, int64_t n_tokens) {
  if (n_tokens < 0) throw UsageError("KV cache: negative token count " + std::to_string(n_tokens));
  auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : it->second.table.size();
  const int64_t need = blocks_for(n_tokens, block_size_);
  if (need - have > n_free_blocks()) return false;
  SeqState& s = it == seqs_.end() ? seqs_[seq] : it->second;
  for (int64_t i = have; i < need; ++i) {
    s.table.blocks_.push_back(take_free_block());
    record(KvOpKind::AppendNew, seq, s.table.blocks_.back());
  }
  return true;
}

BlockId KvCache::take_free_block() {
  const BlockId b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvCache::take_block(BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] != 0) {
    throw UsageError("KV cache mirror: block " + std::to_string(block) + " is not free here");
  }
  // The mirrored free list has the primary's order, so the block is normally at the back.
  const auto it = std::find(free_.rbegin(), free_.rend(), block);
  free_.erase(std::next(it).base());
  refs_[static_cast<size_t>(block)] = 1;
}

void KvCache::release(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  record(KvOpKind::ReleaseSeq, seq);
  const auto& blocks = it->second.table.blocks_;
  // Released in reverse so a re-reserve gets the same blocks in the same order.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    if (*b != kNoBlock) drop_ref(*b);
  }
  seqs_.erase(it);
}

void KvCache::truncate(SeqId seq, int64_t n_tokens) {
  if (n_tokens < 0) throw UsageError("KV cache: negative token count " + std::to_string(n_tokens));
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  record(KvOpKind::Truncate, seq, -1, n_tokens);
  SeqState& s = it->second;
  const int64_t keep = blocks_for(n_tokens, block_size_);
  while (s.table.size() > keep) {
    if (s.table.blocks_.back() != kNoBlock) drop_ref(s.table.blocks_.back());
    s.table.blocks_.pop_back();
  }
}

int64_t KvCache::drop_blocks_before(SeqId seq, int64_t n_entries) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || n_entries <= 0) return 0;
  std::vector<BlockId>& blocks = it->second.table.blocks_;
  const auto end = static_cast<size_t>(std::min<int64_t>(n_entries, it->second.table.size()));
  int64_t dropped = 0;
  for (size_t i = 0; i < end; ++i) {
    if (blocks[i] == kNoBlock) continue;
    drop_ref(blocks[i]);
    blocks[i] = kNoBlock;
    ++dropped;
  }
  if (dropped > 0) record(KvOpKind::DropBefore, seq, -1, static_cast<int64_t>(end));
  return dropped;
}

const BlockTable* KvCache::block_table(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second.table;
}

int64_t KvCache::capacity(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.table.size() * block_size_;
}

void KvCache::append_shared_block(SeqId seq, BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] < 1) {
    throw UsageError("KV cache: block " + std::to_string(block) + " is not in use and cannot be shared");
  }
  SeqState& s = seqs_[seq];
  ++refs_[static_cast<size_t>(block)];
  s.table.blocks_.push_back(block);
  record(KvOpKind::AppendShared, seq, block);
}

void KvCache::retain_block(BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] < 1) {
    throw UsageError("KV cache: cannot retain free or unknown block " + std::to_string(block));
  }
  ++refs_[static_cast<size_t>(block)];
  record(KvOpKind::Retain, -1, block);
}

void KvCache::release_block(BlockId block) {
  drop_ref(block);
  record(KvOpKind::Release, -1, block);
}

void KvCache::drop_ref(BlockId block) {
  if (block < 0 || block >= n_blocks_ || refs_[static_cast<size_t>(block)] < 1) {
    throw UsageError("KV cache: cannot release free or unknown block " + std::to_string(block));
  }
  if (--refs_[static_cast<size_t>(block)] == 0) free_.push_back(block);
}

int32_t KvCache::ref_count(BlockId block) const {
  if (block < 0 || block >= n_blocks_) throw UsageError("KV cache: block " + std::to_string(block) + " out of range");
  return refs_[static_cast<size_t>(block)];
}

bool KvCache::make_writable(SeqId seq, int64_t pos) {
  auto it = seqs_.find(seq);
  if (pos < 0 || it == seqs_.end() || pos >= it->second.table.size() * block_size_) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " has no block for position " + std::to_string(pos));
  }
  BlockId& slot = it->second.table.blocks_[static_cast<size_t>(pos / block_size_)];
  if (slot == kNoBlock) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " gave back the block of position " +
                     std::to_string(pos) + " (out of its sliding window)");
  }
  if (refs_[static_cast<size_t>(slot)] <= 1) return true;
  if (free_.empty()) return false;
  const BlockId fresh = take_free_block();
  copy_block(slot, fresh);
  drop_ref(slot);
  slot = fresh;
  record(KvOpKind::CopyOnWrite, seq, fresh, pos);
  return true;
}

void KvCache::apply(const KvOp& op) {
  auto known = [&]() -> SeqState& {
    auto it = seqs_.find(op.seq);
    if (it == seqs_.end()) throw UsageError("KV cache mirror: sequence " + std::to_string(op.seq) + " is unknown here");
    return it->second;
  };
  switch (op.kind) {
    case KvOpKind::AppendNew:
      take_block(op.block);
      seqs_[op.seq].table.blocks_.push_back(op.block);
      break;
    case KvOpKind::AppendShared: append_shared_block(op.seq, op.block); break;
    case KvOpKind::Retain: retain_block(op.block); break;
    case KvOpKind::Release: release_block(op.block); break;
    case KvOpKind::ReleaseSeq:
      known();
      release(op.seq);
      break;
    case KvOpKind::Truncate:
      known();
      truncate(op.seq, op.n);
      break;
    case KvOpKind::DropBefore:
      known();
      drop_blocks_before(op.seq, op.n);
      break;
    case KvOpKind::CopyOnWrite: {
      SeqState& s = known();
      const int64_t index = op.n / block_size_;
      if (op.n < 0 || index >= s.table.size() || refs_[static_cast<size_t>(s.table.blocks_[static_cast<size_t>(index)])] < 2) {
        throw UsageError("KV cache mirror: sequence " + std::to_string(op.seq) + " has no shared block at position " +
                         std::to_string(op.n));
      }
      BlockId& slot = s.table.blocks_[static_cast<size_t>(index)];
      take_block(op.block);
      copy_block(slot, op.block);
      drop_ref(slot);
      slot = op.block;
      break;
    }
  }
}

uint64_t KvCache::digest() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (BlockId b : free_) mix(b);
  for (int32_t r : refs_) mix(r);
  std::vector<SeqId> ids;
  for (const auto& [id, state] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (SeqId id : ids) {
    const SeqState& st = seqs_.at(id);
    mix(id);
    for (BlockId b : st.table.blocks_) mix(b);
  }
  return h;
}

namespace {

// Copies one block's runs of `v` (KvCache::Runs) to / from the byte cursor `at` (advanced).
template <class T, class Runs>
void put(const std::vector<T>& v, const Runs& r, std::byte*& at) {
  for (size_t s = 0; s < r.slots; ++s) {
    std::memcpy(at, v.data() + r.first + s * r.stride, r.len * sizeof(T));
    at += r.len * sizeof(T);
  }
}
template <class T, class Runs>
void take(std::vector<T>& v, const Runs& r, const std::byte*& at) {
  for (size_t s = 0; s < r.slots; ++s) {
    std::memcpy(v.data() + r.first + s * r.stride, at, r.len * sizeof(T));
    at += r.len * sizeof(T);
  }
}

}  // namespace

// Values and (Q8_0) scales of heads [h0, h1) in every slot of `block`.
KvCache::HeadRuns KvCache::head_runs(BlockId block, int64_t h0, int64_t h1) const {
  if (block < 0 || block >= n_blocks_ || h0 < 0 || h1 > n_kv_heads_ || h0 >= h1) {
    throw UsageError("kv cache: heads [" + std::to_string(h0) + ", " + std::to_string(h1) + ") of block " +
                     std::to_string(block) + " (the cache has " + std::to_string(n_blocks_) + " blocks of " +
                     std::to_string(n_kv_heads_) + " KV heads)");
  }
  const auto row = static_cast<size_t>(row_elems_), hd = static_cast<size_t>(head_dim_);
  const size_t first = static_cast<size_t>(block) * static_cast<size_t>(block_size_) * row;
  HeadRuns r{};
  r.values = {first + static_cast<size_t>(h0) * hd, static_cast<size_t>(block_size_), row,
              static_cast<size_t>(h1 - h0) * hd};
  if (kv_type_is_quantized(type_)) {
    // Quantized: the runs of the byte array (Q4_0: two values a byte) and of the scales.
    const auto g = static_cast<size_t>(scale_group_);
    r.scales = {r.values.first / g, r.values.slots, row / g, r.values.len / g};
    r.values = {kv_value_byte(type_, r.values.first), r.values.slots, kv_value_byte(type_, row),
                kv_value_byte(type_, r.values.len)};
  }
  return r;
}

size_t KvCache::heads_bytes(int64_t h0, int64_t h1) const {
  const size_t n = static_cast<size_t>(block_size_) * static_cast<size_t>(h1 - h0) * static_cast<size_t>(head_dim_);
  size_t per_layer = 0;
  switch (type_) {
    case KvType::F32: per_layer = 2 * n * sizeof(float); break;
    case KvType::F16:
    case KvType::BF16: per_layer = 2 * n * sizeof(uint16_t); break;
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0:
      per_layer = 2 * kv_value_byte(type_, n) + 2 * (n / static_cast<size_t>(scale_group_)) * sizeof(uint16_t);
      break;
  }
  return per_layer * layers_.size();
}

size_t KvCache::block_bytes() const { return heads_bytes(0, n_kv_heads_); }

void KvCache::export_heads(BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) const {
  const HeadRuns r = head_runs(block, h0, h1);
  if (out.size() != heads_bytes(h0, h1)) {
    throw UsageError("kv cache: export of block " + std::to_string(block) + " into " + std::to_string(out.size()) +
                     " bytes");
  }
  std::byte* at = out.data();
  for (const auto& l : layers_) {
    switch (type_) {
      case KvType::F32: put(l.k32, r.values, at), put(l.v32, r.values, at); break;
      case KvType::F16:
      case KvType::BF16: put(l.k16, r.values, at), put(l.v16, r.values, at); break;
      case KvType::Q8_0:
      case KvType::FP8_E4M3:
      case KvType::Q4_0:
        put(l.kq, r.values, at), put(l.vq, r.values, at);
        put(l.ks, r.scales, at), put(l.vs, r.scales, at);
        break;
    }
  }
}

void KvCache::import_heads(BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in) {
  const HeadRuns r = head_runs(block, h0, h1);
  if (in.size() != heads_bytes(h0, h1)) {
    throw UsageError("kv cache: import of " + std::to_string(in.size()) + " bytes into block " +
                     std::to_string(block) + " (its heads hold " + std::to_string(heads_bytes(h0, h1)) + ")");
  }
  const std::byte* at = in.data();
  for (auto& l : layers_) {
    switch (type_) {
      case KvType::F32: take(l.k32, r.values, at), take(l.v32, r.values, at); break;
      case KvType::F16:
      case KvType::BF16: take(l.k16, r.values, at), take(l.v16, r.values, at); break;
      case KvType::Q8_0:
      case KvType::FP8_E4M3:
      case KvType::Q4_0:
        take(l.kq, r.values, at), take(l.vq, r.values, at);
        take(l.ks, r.scales, at), take(l.vs, r.scales, at);
        break;
    }
  }
}

void KvCache::export_block(BlockId block, std::span<std::byte> out) const { export_heads(block, 0, n_kv_heads_, out); }

void KvCache::import_block(BlockId block, std::span<const std::byte> in) { import_heads(block, 0, n_kv_heads_, in); }

void KvCache::copy_block(BlockId from, BlockId to) {
  const size_t n = static_cast<size_t>(block_size_) * static_cast<size_t>(row_elems_);
  const size_t src = static_cast<size_t>(from) * n, dst = static_cast<size_t>(to) * n;
  for (auto& l : layers_) {
    switch (type_) {
      case KvType::F32:
        std::copy_n(l.k32.begin() + src, n, l.k32.begin() + dst);
        std::copy_n(l.v32.begin() + src, n, l.v32.begin() + dst);
        break;
      case KvType::F16:
      case KvType::BF16:
        std::copy_n(l.k16.begin() + src, n, l.k16.begin() + dst);
        std::copy_n(l.v16.begin() + src, n, l.v16.begin() + dst);
        break;
      case KvType::Q8_0:
      case KvType::FP8_E4M3:
      case KvType::Q4_0: {
        const size_t nb = kv_value_byte(type_, n), bsrc = kv_value_byte(type_, src), bdst = kv_value_byte(type_, dst);
        std::copy_n(l.kq.begin() + bsrc, nb, l.kq.begin() + bdst);
        std::copy_n(l.vq.begin() + bsrc, nb, l.vq.begin() + bdst);
        const auto g = static_cast<size_t>(scale_group_);
        const size_t ns = n / g, ssrc = src / g, sdst = dst / g;
        std::copy_n(l.ks.begin() + ssrc, ns, l.ks.begin() + sdst);
        std::copy_n(l.vs.begin() + ssrc, ns, l.vs.begin() + sdst);
        break;
      }
    }
  }
}

size_t KvCache::bytes() const {
  return 2 * static_cast<size_t>(n_layers_) * static_cast<size_t>(n_blocks_) * static_cast<size_t>(block_size_) *
         static_cast<size_t>(n_kv_heads_) * kv_row_bytes(type_, head_dim_);
}

int64_t KvCache::row_of(SeqId seq, int64_t pos) const {
  auto it = seqs_.find(seq);
  if (pos < 0 || it == seqs_.end() || pos >= it->second.table.size() * block_size_) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " has no reserved slot for position " +
                     std::to_string(pos));
  }
  const BlockId block = it->second.table[pos / block_size_];
  if (block == kNoBlock) {
    throw UsageError("KV cache: sequence " + std::to_string(seq) + " gave back the block of position " +
                     std::to_string(pos) + " (out of its sliding window)");
  }
  return static_cast<int64_t>(block) * block_size_ + pos % block_size_;
}

// One KV head's row of head_dim values at element offset `off` into a quantized type's arrays.
void KvCache::quantize_row(const float* x, std::vector<uint8_t>& q, std::vector<uint16_t>& scales, size_t off) {
  uint16_t* s = scales.data() + off / static_cast<size_t>(scale_group_);
  uint8_t* bytes = q.data() + kv_value_byte(type_, off);
  switch (type_) {
    case KvType::Q8_0: quantize_kv_q8_row(x, reinterpret_cast<int8_t*>(bytes), s, head_dim_, scale_group_); break;
    case KvType::FP8_E4M3: quantize_kv_fp8_row(x, bytes, s, head_dim_); break;
    case KvType::Q4_0: quantize_kv_q4_row(x, bytes, s, head_dim_, scale_group_); break;
    default: break;
  }
}

void KvCache::dequantize_row(const std::vector<uint8_t>& q, const std::vector<uint16_t>& scales, size_t off,
                             float* dst) const {
  const uint16_t* s = scales.data() + off / static_cast<size_t>(scale_group_);
  const uint8_t* bytes = q.data() + kv_value_byte(type_, off);
  switch (type_) {
    case KvType::Q8_0: dequantize_kv_q8_row(reinterpret_cast<const int8_t*>(bytes), s, dst, head_dim_, scale_group_); break;
    case KvType::FP8_E4M3: dequantize_kv_fp8_row(bytes, *s, dst, head_dim_); break;
    case KvType::Q4_0: dequantize_kv_q4_row(bytes, s, dst, head_dim_, scale_group_); break;
    default: break;
  }
}

void KvCache::write_row(int64_t layer, int64_t row, std::span<const float> k, std::span<const float> v) {
  if (layer < 0 || layer >= n_layers_ || row < 0 || row >= n_blocks_ * block_size_ ||
      static_cast<int64_t>(k.size()) != row_elems_ || static_cast<int64_t>(v.size()) != row_elems_) {
    throw UsageError("KV cache: write_row arguments out of range");
  }
  LayerStore& l = layers_[static_cast<size_t>(layer)];
  const size_t base = static_cast<size_t>(row * row_elems_);
  switch (type_) {
    case KvType::F32:
      for (int64_t i = 0; i < row_elems_; ++i) {
        l.k32[base + i] = k[i];
        l.v32[base + i] = v[i];
      }
      break;
    case KvType::F16:
      for (int64_t i = 0; i < row_elems_; ++i) {
        l.k16[base + i] = fp32_to_fp16(k[i]);
        l.v16[base + i] = fp32_to_fp16(v[i]);
      }
      break;
    case KvType::BF16:
      for (int64_t i = 0; i < row_elems_; ++i) {
        l.k16[base + i] = fp32_to_bf16(k[i]);
        l.v16[base + i] = fp32_to_bf16(v[i]);
      }
      break;
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0:
      // One head's row at a time; rows start on a scale group's boundary.
      for (int64_t h = 0; h < n_kv_heads_; ++h) {
        const size_t off = base + static_cast<size_t>(h * head_dim_);
        quantize_row(k.data() + h * head_dim_, l.kq, l.ks, off);
        quantize_row(v.data() + h * head_dim_, l.vq, l.vs, off);
      }
      break;
  }
}

void KvCache::read_row(int64_t layer, int64_t row, std::span<float> k, std::span<float> v) const {
  if (layer < 0 || layer >= n_layers_ || row < 0 || row >= n_blocks_ * block_size_ ||
      static_cast<int64_t>(k.size()) != row_elems_ || static_cast<int64_t>(v.size()) != row_elems_) {
    throw UsageError("KV cache: read_row arguments out of range");
  }
  const LayerStore& l = layers_[static_cast<size_t>(layer)];
  const size_t base = static_cast<size_t>(row * row_elems_);
  if (kv_type_is_quantized(type_)) {
    for (int64_t h = 0; h < n_kv_heads_; ++h) {
      const size_t off = base + static_cast<size_t>(h * head_dim_);
      dequantize_row(l.kq, l.ks, off, k.data() + h * head_dim_);
      dequantize_row(l.vq, l.vs, off, v.data() + h * head_dim_);
    }
    return;
  }
  for (int64_t i = 0; i < row_elems_; ++i) {
    switch (type_) {
      case KvType::F32: k[i] = l.k32[base + i]; v[i] = l.v32[base + i]; break;
      case KvType::F16: k[i] = fp16_to_fp32(l.k16[base + i]); v[i] = fp16_to_fp32(l.v16[base + i]); break;
      case KvType::BF16: k[i] = bf16_to_fp32(l.k16[base + i]); v[i] = bf16_to_fp32(l.v16[base + i]); break;
      default: break;  // quantized: handled above
    }
  }
}

KvLayerView KvCache::layer_view(int64_t layer) const {
  if (layer < 0 || layer >= n_layers_) throw UsageError("KV cache: layer " + std::to_string(layer) + " out of range");
  const LayerStore& l = layers_[static_cast<size_t>(layer)];
  KvLayerView view;
  view.type = type_;
  switch (type_) {
    case KvType::F32:
      view.k_f32 = l.k32.data();
      view.v_f32 = l.v32.data();
      break;
    case KvType::F16:
    case KvType::BF16:
      view.k_u16 = l.k16.data();
      view.v_u16 = l.v16.data();
      break;
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0:
      view.k_bytes = l.kq.data();
      view.v_bytes = l.vq.data();
      view.k_scales = l.ks.data();
      view.v_scales = l.vs.data();
      view.scale_group = scale_group_;
      break;
  }
  view.block_size = block_size_;
  view.n_kv_heads = n_kv_heads_;
  view.head_dim = head_dim_;
  return view;
}

}  // namespace peregrine
