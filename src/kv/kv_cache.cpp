#include "kv/kv_cache.h"

#include <utility>

#include "util/error.h"

namespace peregrine {
namespace {

const KvStorage& non_null(const std::unique_ptr<KvStorage>& s) {
  if (!s) throw UsageError("KV cache: no storage");
  return *s;
}

}  // namespace

KvCache::KvCache(std::unique_ptr<KvStorage> storage)
    : storage_(std::move(storage)), pool_(non_null(storage_).n_blocks(), storage_->block_size()) {}

}  // namespace peregrine
