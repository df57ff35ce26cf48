#pragma once
// The K/V tensors of a paged KV cache, as the host may know them: their spec and their sizes,
// never their bytes. An execution context creates the storage (ExecutionContext::allocate_kv) in
// memory it chooses (host heap, protected pages, device memory) and is the only code that reads
// or writes it, through its operations (write_kv, attention, copy_kv_blocks, export_kv /
// import_kv, read_kv_row). Which block holds which sequence's positions is the BlockPool's
// business (kv/block_pool.h); the storage only has n_blocks blocks of block_size slots.
// kv/host_kv_storage.h is the storage of host contexts.
#include <cstddef>
#include <cstdint>

#include "kv/kv_type.h"

namespace peregrine {

struct KvStorageSpec {
  KvShape shape;  // per token: K and V rows of n_kv_heads x head_dim values in n_layers layers
  KvType type = KvType::F16;
  int64_t n_blocks = 0;
  int32_t block_size = 16;
};

// Throws UsageError for non-positive or absurd sizes (over 64 GiB), and for a head dimension the
// type cannot store (kv_type_supports_head_dim).
void check_kv_spec(const KvStorageSpec& spec);

class KvStorage {
 public:
  // Throws as check_kv_spec.
  explicit KvStorage(const KvStorageSpec& spec);
  virtual ~KvStorage() = default;
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvStorageSpec& spec() const { return spec_; }
  const KvShape& shape() const { return spec_.shape; }
  KvType type() const { return spec_.type; }
  int64_t n_blocks() const { return spec_.n_blocks; }
  int32_t block_size() const { return spec_.block_size; }
  int64_t n_layers() const { return spec_.shape.n_layers; }
  int64_t n_kv_heads() const { return spec_.shape.n_kv_heads; }
  int64_t head_dim() const { return spec_.shape.head_dim; }

  // K and V of all layers (quantized: values and scales).
  size_t bytes() const;
  // The K/V of one block, every layer, as ExecutionContext::export_kv writes it.
  size_t block_bytes() const { return heads_bytes(0, n_kv_heads()); }
  // The same for the KV heads [h0, h1) only (moving heads between tensor-parallel pools).
  size_t heads_bytes(int64_t h0, int64_t h1) const;

 private:
  KvStorageSpec spec_;
};

}  // namespace peregrine
