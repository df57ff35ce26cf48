#pragma once
// The mutations of a BlockPool's bookkeeping, recorded in order so another BlockPool can
// replay them with the same block ids. Tensor- and pipeline-parallel ranks each hold their own
// shard of every block (their KV heads or their layers); only rank 0 decides which blocks a
// sequence gets (BlockManager, prefix cache), and the other ranks mirror its decisions by
// applying its journal before each step (dist/ ships it with the step's batch).
#include <cstdint>
#include <vector>

#include "util/batch.h"

namespace peregrine {

using BlockId = int32_t;
// A block table entry whose block was given back: positions a sliding window no longer reads.
inline constexpr BlockId kNoBlock = -1;

enum class KvOpKind : uint8_t {
  AppendNew,     // seq takes `block` from the free list (reserve)
  AppendShared,  // seq appends the in-use `block`, taking a reference (prefix-cache hit)
  Retain,        // one more reference to `block` (the prefix cache keeps it)
  Release,       // one reference to `block` dropped (the prefix cache let it go)
  ReleaseSeq,    // seq's blocks released, last first, and the sequence forgotten
  Truncate,      // seq keeps positions [0, n)
  CopyOnWrite,   // seq's block holding position n is copied into the free `block`, which replaces it
  DropBefore,    // seq's table entries [0, n) give their blocks back and become kNoBlock (sliding window)
};

struct KvOp {
  KvOpKind kind = KvOpKind::AppendNew;
  SeqId seq = -1;
  BlockId block = -1;
  int64_t n = 0;
};

using KvJournal = std::vector<KvOp>;

}  // namespace peregrine
