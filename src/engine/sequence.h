#pragma once
// The engine's state of one request: its tokens, how much of them the KV cache holds, its own
// sampler and its output-side state (detokenizer, held-back text for stop strings).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

enum class SequenceStatus { Waiting, Running, Finished };

struct Sequence {
  Sequence(RequestId id_, Request request_, uint64_t arrival_)
      : id(id_), request(std::move(request_)), arrival(arrival_), sampler(request.sampling),
        tokens(request.prompt) {}

  RequestId id;
  Request request;
  uint64_t arrival;              // submission order: FCFS tie-break and "newest" for preemption
  Sampler sampler;               // kept across preemption: a recomputed request draws on where it left off
  std::vector<TokenId> tokens;   // [prompt + generated]
  int64_t n_computed = 0;        // leading tokens whose K/V is in the cache
  int64_t n_preemptions = 0;
  SequenceStatus status = SequenceStatus::Waiting;

  // Output side (engine_core): streamed text not yet delivered because a stop string might start
  // in it.
  std::optional<StreamDecoder> detok;
  std::string held_text;

  int64_t prompt_len() const { return static_cast<int64_t>(request.prompt.size()); }
  int64_t n_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len(); }
  int64_t n_to_compute() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
  bool in_prefill() const { return n_to_compute() > 1; }
  SeqId seq_id() const { return static_cast<SeqId>(id); }
};

}  // namespace peregrine
