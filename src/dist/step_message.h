#pragma once
// What rank 0 broadcasts to every other rank of a tensor/pipeline-parallel layout before each
// step (and the few control messages around them). The byte layout is private to this file pair;
// both ends are the same binary.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_journal.h"
#include "kv/kv_type.h"
#include "util/batch.h"

namespace peregrine::dist {

enum class StepKind : uint32_t {
  Forward = 1,  // apply `journal` to the KV cache, then run `batch`
  Heartbeat,    // rank 0 is idle but alive
  BindCache,    // build a fresh KV cache: `cache`
  CheckMirror,  // every rank sends rank 0 the digest of its KV bookkeeping (after applying `journal`)
  Shutdown,     // leave the worker loop
};

struct CacheSpec {
  KvType type = KvType::F16;
  int64_t n_blocks = 0;
  int32_t block_size = 16;
};

struct StepMessage {
  StepKind kind = StepKind::Heartbeat;
  KvJournal journal;  // Forward, CheckMirror
  Batch batch;        // Forward
  CacheSpec cache;    // BindCache
};

// Appends the message's bytes to `out` (cleared first).
void encode(const StepMessage& m, std::vector<std::byte>& out);
// Throws CommError for bytes that are not a message.
void decode(std::span<const std::byte> bytes, StepMessage& m);

}  // namespace peregrine::dist
