#pragma once
// KV storage in host memory: what host contexts (the CPU's, the guarded test context) keep the
// K/V in, and the only place that knows its layout. Its memory is one Buffer the context
// allocated (ExecutionContext::allocate), so a context decides where it lives by how it
// allocates. Code outside the context's operations never sees this class: it holds a KvStorage.
//
// Layout, per layer: K values, V values, then (quantized types) K scales, V scales, each array
// [n_blocks][block_size][n_kv_heads][head_dim] elements (scales: [...][head_dim / scale_group]),
// each starting on a 64-byte boundary.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "util/buffer.h"

namespace peregrine {

// Read access to one layer's K and V storage, for the attention kernel. Exactly one of the
// f32 / u16 / bytes pointer groups is set, by `type` (u16 holds f16 or bf16 bits; bytes and
// scales hold a quantized type: Q8_0's int8 values, FP8_E4M3's codes or Q4_0's nibbles, and
// their f16 scales; kv/kv_type.h).
// k_f32, v_f32, k_u16, v_u16: [n_blocks][block_size][n_kv_heads][head_dim]
// k_bytes, v_bytes: the same elements, kv_value_byte(type, off) the bytes of element `off`
// k_scales, v_scales: [n_blocks][block_size][n_kv_heads][head_dim / scale_group], so the scale
// of the value at element offset `off` is at off / scale_group.
struct KvLayerView {
  KvType type = KvType::F32;
  const float* k_f32 = nullptr;
  const float* v_f32 = nullptr;
  const uint16_t* k_u16 = nullptr;
  const uint16_t* v_u16 = nullptr;
  const uint8_t* k_bytes = nullptr;
  const uint8_t* v_bytes = nullptr;
  const uint16_t* k_scales = nullptr;
  const uint16_t* v_scales = nullptr;
  int64_t scale_group = 0;  // values per scale (kv_scale_group)
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;

  // Element offset of (block, slot, kv_head, 0).
  size_t offset(BlockId block, int64_t slot, int64_t kv_head) const {
    return static_cast<size_t>(((static_cast<int64_t>(block) * block_size + slot) * n_kv_heads + kv_head) * head_dim);
  }
};

class HostKvStorage final : public KvStorage {
 public:
  // The bytes a Buffer must hold for `spec` (bytes() plus alignment).
  static size_t buffer_bytes(const KvStorageSpec& spec);
  // Lays the storage out in `memory` (at least buffer_bytes(spec), uninitialized) and clears it.
  // Throws UsageError as check_kv_spec, or if `memory` is too small.
  HostKvStorage(const KvStorageSpec& spec, Buffer memory);

  // Physical row = block * block_size + slot.
  // Stores one token's K and V (each [n_kv_heads][head_dim], converted to the cache type; a
  // quantized type quantizes each head's row on its own) at physical row `row` of `layer`.
  void write_row(int64_t layer, int64_t row, std::span<const float> k, std::span<const float> v);
  // Reads one token's K and V back as f32 (each [n_kv_heads][head_dim]).
  void read_row(int64_t layer, int64_t row, std::span<float> k, std::span<float> v) const;
  KvLayerView layer_view(int64_t layer) const;

  // Block `from`'s K/V in every layer into block `to`.
  void copy_block(BlockId from, BlockId to);
  // The K/V of the KV heads [h0, h1) of one block, every layer, as bytes
  // ([layer][K values, V values, quantized: K scales, V scales]), heads_bytes(h0, h1) long;
  // importing writes them into a block of a storage of the same type and block size (its head
  // count may differ: tensor-parallel pools).
  void export_heads(BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) const;
  void import_heads(BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in);

 private:
  struct Layer {             // the layer's arrays in memory_
    std::byte* k = nullptr;  // values: float, uint16_t or bytes by type
    std::byte* v = nullptr;
    uint16_t* ks = nullptr;  // quantized: scales
    uint16_t* vs = nullptr;
  };
  struct Runs {
    size_t first, slots, stride, len;  // `slots` runs of `len` bytes, `stride` bytes apart
  };
  Runs value_runs(BlockId block, int64_t h0, int64_t h1) const;
  Runs scale_runs(BlockId block, int64_t h0, int64_t h1) const;
  void check_row(int64_t layer, int64_t row, size_t k_size, size_t v_size, const char* what) const;

  Buffer memory_;
  std::vector<Layer> layers_;
  size_t value_size_;    // bytes per element of a float type (4 or 2); 0 for quantized types
  int64_t row_elems_;    // n_kv_heads * head_dim
  int64_t scale_group_;  // values per scale of a quantized type (kv_scale_group), 0 otherwise
};

}  // namespace peregrine
