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

// Message tags between the ranks: step messages from rank 0, hidden states between pipeline
// stages, logits to rank 0, KV blocks to the decode pool.
inline constexpr int kTagStep = 10;
inline constexpr int kTagHidden = 11;
inline constexpr int kTagLogits = 12;
inline constexpr int kTagDigest = 13;
inline constexpr int kTagKv = 14;
inline constexpr int kTagStatus = 15;  // a decode rank's damaged sequences after a decode step

enum class StepKind : uint32_t {
  Forward = 1,  // apply `journal` to the KV cache, then run `batch` (disaggregated: the prefill
                //   pool runs `batch`, the decode pool `decode`)
  Heartbeat,    // rank 0 is idle but alive
  BindCache,    // build a fresh KV cache: `cache`
  CheckMirror,  // every rank sends rank 0 the digest of its KV bookkeeping (after applying `journal`)
  Shutdown,     // leave the worker loop
  KvTransfer,   // apply `journal`, then receive the K/V of `transfer.blocks` (kTagKv) for `transfer.seq`
};

struct CacheSpec {
  KvType type = KvType::F16;
  int64_t n_blocks = 0;
  int32_t block_size = 16;
};

// Disaggregated prefill/decode: a prompt's blocks, sent from the prefill pool to the decode pool.
// Each prefill rank sends each decode rank the KV heads both hold (taking each head from the
// lowest prefill rank that holds it), one message per pair: an FNV-1a checksum of the bytes, then
// [blocks][KvStorage::heads_bytes(those heads)].
struct KvTransferSpec {
  SeqId seq = -1;
  int64_t length = 0;  // positions [0, length) hold the prompt's K/V
  std::vector<int32_t> blocks;
};

struct StepMessage {
  StepKind kind = StepKind::Heartbeat;
  KvJournal journal;  // Forward, CheckMirror
  Batch batch;        // Forward
  Batch decode;       // Forward, disaggregated: the decode pool's rows
  CacheSpec cache;    // BindCache
  KvTransferSpec transfer;  // KvTransfer
};

// FNV-1a over `bytes` (the transfer checksum).
uint64_t checksum_bytes(std::span<const std::byte> bytes);

// Appends the message's bytes to `out` (cleared first).
void encode(const StepMessage& m, std::vector<std::byte>& out);
// Throws CommError for bytes that are not a message.
void decode(std::span<const std::byte> bytes, StepMessage& m);

}  // namespace peregrine::dist
