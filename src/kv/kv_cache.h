#pragma once
// A paged KV cache as its users hold it: the block pool (bookkeeping: which blocks each sequence
// holds, references, journal; kv/block_pool.h) and the storage those blocks index (the K/V
// tensors, created and owned by an execution context; kv/kv_storage.h). The host reads and
// changes the pool; only the context's operations touch the storage.
//
// Built from storage a context allocated: `KvCache kv(ctx.allocate_kv({shape, type, n_blocks,
// block_size}))`, or `model.make_kv_cache(type, n_blocks)`. Copy-on-write in the pool leaves
// pending copies; the context applies them (apply_block_copies in backend/execution_context.h)
// before the storage is next read or written: the model's forward and dist's transfers do.
#include <memory>

#include "kv/block_pool.h"
#include "kv/kv_storage.h"

namespace peregrine {

class KvCache {
 public:
  // A pool of storage->n_blocks() blocks of storage->block_size() slots over `storage` (not null).
  explicit KvCache(std::unique_ptr<KvStorage> storage);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  KvStorage& storage() { return *storage_; }
  const KvStorage& storage() const { return *storage_; }

 private:
  std::unique_ptr<KvStorage> storage_;
  BlockPool pool_;
};

}  // namespace peregrine
