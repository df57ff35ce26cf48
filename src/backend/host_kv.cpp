// ExecutionContext's default KV operations: host storage in allocate()d memory (backend/host_kv.h).
#include "backend/host_kv.h"

#include <memory>
#include <utility>

#include "backend/execution_context.h"
#include "util/error.h"

namespace peregrine {

const HostKvStorage& host_kv(const KvStorage& kv) {
  const auto* host = dynamic_cast<const HostKvStorage*>(&kv);
  if (host == nullptr) throw UsageError("KV storage: not host storage (it belongs to another kind of context)");
  return *host;
}

HostKvStorage& host_kv(KvStorage& kv) { return const_cast<HostKvStorage&>(host_kv(std::as_const(kv))); }

std::unique_ptr<KvStorage> ExecutionContext::allocate_kv(const KvStorageSpec& spec) {
  return std::make_unique<HostKvStorage>(spec, allocate(HostKvStorage::buffer_bytes(spec)));
}

void ExecutionContext::copy_kv_blocks(KvStorage& kv, std::span<const BlockCopy> copies) {
  HostKvStorage& host = host_kv(kv);
  for (const BlockCopy& c : copies) host.copy_block(c.from, c.to);
}

void ExecutionContext::export_kv(const KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) {
  host_kv(kv).export_heads(block, h0, h1, out);
}

void ExecutionContext::import_kv(KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in) {
  host_kv(kv).import_heads(block, h0, h1, in);
}

void ExecutionContext::read_kv_row(const KvStorage& kv, int64_t layer, int64_t row, std::span<float> k,
                                   std::span<float> v) {
  host_kv(kv).read_row(layer, row, k, v);
}

}  // namespace peregrine
