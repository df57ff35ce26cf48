#pragma once
// The output side of one request: stop conditions and the text it may deliver. Stop strings can
// span token boundaries, so text that could be the start of a stop string is held back until it
// is known not to be; the text before a stop string is delivered, the stop string is not.
#include <optional>
#include <string>

#include "engine/request.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {

struct TokenOutcome {
  std::string text;                      // deliverable now
  RequestFinish finish = RequestFinish::None;
};

// Appends nothing: `seq.tokens` already ends with `token`. Decides whether the request ends and
// what text it can deliver. `tokenizer` may be null (no text, no EOS, no stop strings).
// A request whose grammar is complete (seq.grammar_done) ends with Stop after this token's text.
TokenOutcome process_token(Sequence& seq, TokenId token, const Tokenizer* tokenizer, int64_t context_length);

// Ends the request without a new token: everything held back is delivered.
TokenOutcome end_output(Sequence& seq, RequestFinish finish);

}  // namespace peregrine
