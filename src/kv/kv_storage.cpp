#include "kv/kv_storage.h"

#include <limits>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

// Keeps a mistyped flag from asking for terabytes: 64 GiB of cache is beyond this engine's scope.
constexpr double kMaxCacheBytes = 64.0 * 1024 * 1024 * 1024;

}  // namespace

void check_kv_spec(const KvStorageSpec& spec) {
  const KvShape& s = spec.shape;
  if (spec.n_blocks < 1 || spec.n_blocks > std::numeric_limits<int32_t>::max()) {
    throw UsageError("KV cache: block count " + std::to_string(spec.n_blocks) + " is out of range");
  }
  if (spec.block_size < 1 || spec.block_size > 65536) {
    throw UsageError("KV cache: block size " + std::to_string(spec.block_size) + " is out of range [1, 65536]");
  }
  if (s.n_layers < 1 || s.n_kv_heads < 1 || s.head_dim < 1) {
    throw UsageError("KV cache: model config has no layers / KV heads / head dimension");
  }
  if (!kv_type_supports_head_dim(spec.type, s.head_dim)) {
    throw UsageError("KV cache: type " + std::string(kv_type_name(spec.type)) +
                     " needs an even head dimension; this model's is " + std::to_string(s.head_dim) +
                     " (use --kv-type f16)");
  }
  const double total = 2.0 * static_cast<double>(s.n_layers) * static_cast<double>(spec.n_blocks) *
                       static_cast<double>(spec.block_size) * static_cast<double>(s.n_kv_heads) *
                       static_cast<double>(kv_row_bytes(spec.type, s.head_dim));
  if (total > kMaxCacheBytes) {
    throw UsageError("KV cache: " + std::to_string(spec.n_blocks) + " blocks of " + std::to_string(spec.block_size) +
                     " tokens would need " + std::to_string(total / (1024.0 * 1024 * 1024)) +
                     " GiB, over the 64 GiB limit");
  }
}

KvStorage::KvStorage(const KvStorageSpec& spec) : spec_(spec) { check_kv_spec(spec); }

size_t KvStorage::bytes() const {
  return 2 * static_cast<size_t>(n_layers()) * static_cast<size_t>(n_blocks()) * static_cast<size_t>(block_size()) *
         static_cast<size_t>(n_kv_heads()) * kv_row_bytes(type(), head_dim());
}

size_t KvStorage::heads_bytes(int64_t h0, int64_t h1) const {
  if (h0 < 0 || h1 > n_kv_heads() || h0 >= h1) {
    throw UsageError("kv cache: heads [" + std::to_string(h0) + ", " + std::to_string(h1) + ") of a cache of " +
                     std::to_string(n_kv_heads()) + " KV heads");
  }
  const size_t n = static_cast<size_t>(block_size()) * static_cast<size_t>(h1 - h0) * static_cast<size_t>(head_dim());
  size_t per_layer = 0;
  switch (type()) {
    case KvType::F32:
      per_layer = 2 * n * sizeof(float);
      break;
    case KvType::F16:
    case KvType::BF16:
      per_layer = 2 * n * sizeof(uint16_t);
      break;
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0: {
      const auto group = static_cast<size_t>(kv_scale_group(type(), head_dim()));
      per_layer = 2 * kv_value_byte(type(), n) + 2 * (n / group) * sizeof(uint16_t);
      break;
    }
  }
  return per_layer * static_cast<size_t>(n_layers());
}

}  // namespace peregrine
