#pragma once
// A KV cache for tests below the execution context (kv/ and kernels/ tests): a block pool and
// host storage in heap memory, with the storage's own row access and copy-on-write applied by
// hand (sync), where the product goes through a context (ExecutionContext::allocate_kv and its
// KV operations).
#include <span>

#include "kv/block_pool.h"
#include "kv/host_kv_storage.h"
#include "util/buffer.h"

namespace peregrine::test {

inline KvStorageSpec kv_spec(const KvShape& shape, KvType type, int64_t n_blocks, int32_t block_size) {
  return {shape, type, n_blocks, block_size};
}

struct HostKv {
  HostKv(const KvShape& shape, KvType type, int64_t n_blocks, int32_t block_size = 16)
      : pool(n_blocks, block_size),
        storage(kv_spec(shape, type, n_blocks, block_size),
                host_buffer(HostKvStorage::buffer_bytes(kv_spec(shape, type, n_blocks, block_size)))) {}

  // Applies the pool's pending copy-on-write copies to the storage (what the context does
  // before a forward pass).
  void sync() {
    for (const BlockCopy& c : pool.pending_copies()) storage.copy_block(c.from, c.to);
    pool.clear_pending_copies();
  }
  // Row access by (sequence, position), after sync().
  void write(int64_t layer, SeqId seq, int64_t pos, std::span<const float> k, std::span<const float> v) {
    sync();
    storage.write_row(layer, pool.row_of(seq, pos), k, v);
  }
  void read(int64_t layer, SeqId seq, int64_t pos, std::span<float> k, std::span<float> v) {
    sync();
    storage.read_row(layer, pool.row_of(seq, pos), k, v);
  }

  BlockPool pool;
  HostKvStorage storage;
};

}  // namespace peregrine::test
