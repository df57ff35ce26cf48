#pragma once
// Host contexts' side of the KV seam: the storage they allocate is HostKvStorage
// (kv/host_kv_storage.h), and these turn the KvStorage the host passes back into it. Only
// backend/ includes this; nothing above the context sees the storage's layout.
#include "kv/host_kv_storage.h"
#include "kv/kv_storage.h"

namespace peregrine {

// Throws UsageError if `kv` is not host storage (storage another context created).
HostKvStorage& host_kv(KvStorage& kv);
const HostKvStorage& host_kv(const KvStorage& kv);

}  // namespace peregrine
