#pragma once
// What a caller asks the serving engine for, and what it hears back.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grammar/token_constraint.h"
#include "sampling/sampler.h"
#include "util/batch.h"

namespace peregrine {

using RequestId = int64_t;

struct Request {
  std::vector<TokenId> prompt;          // [n >= 1] token ids (BOS included if the model wants it)
  SamplingParams sampling;              // each request gets its own Sampler seeded from here
  int64_t max_tokens = 128;             // generated tokens at most (>= 1)
  std::vector<TokenId> stop_token_ids;  // end the request when one is generated (not delivered as text)
  std::vector<std::string> stop;        // stop strings: text before one is delivered, the string is not
  bool ignore_eos = false;              // keep going past end-of-generation tokens
  int32_t priority = 0;                 // higher runs first; ties in arrival order (FCFS)
  bool speculate = true;                // let the engine's proposer (if any) draft tokens for it
  // Constrained decoding: every generated token keeps the text a prefix of the grammar's language
  // (masked before sampling, drafts too); end-of-generation and stop token ids only once the text
  // is complete; the request ends when nothing more can follow. Null: free text. The constraint
  // must be built on this model's vocabulary (one may be shared by many requests).
  std::shared_ptr<TokenConstraint> grammar;
};

enum class RequestFinish { None, Stop, Length, Cancelled, Error };
const char* request_finish_name(RequestFinish f);  // "stop" | "length" | "cancelled" | "error" | ""

// One generated token with what the sampler reports about it (see SampleResult).
struct GeneratedToken {
  TokenId token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
};

// One step's news for one request. A request's events end with exactly one carrying a finish
// reason other than None.
struct RequestEvent {
  RequestId id = -1;
  // Tokens generated this step, in order: one per step, or several when a speculative step
  // accepted proposed tokens. Empty for events that only end a request (cancel, error).
  std::vector<GeneratedToken> tokens;
  std::string text;              // newly deliverable text (may be empty while a stop string could start)
  RequestFinish finish = RequestFinish::None;
  std::string error;             // for RequestFinish::Error
  bool client_error = false;     // the error comes from the request's own input (its grammar), not the engine
};

using RequestEventCallback = std::function<void(const RequestEvent&)>;

}  // namespace peregrine
