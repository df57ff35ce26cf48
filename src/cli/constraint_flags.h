#pragma once
// --json-schema FILE / --grammar FILE: constrained decoding for the commands that run the engine
// themselves (bench-serve offline), as `serve` takes response_format and grammar per request.
#include <memory>
#include <optional>
#include <string>

#include "grammar/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::cli {

// The constraint the files ask for (at most one of them), on this tokenizer's vocabulary; null
// when neither is given. Throws UsageError (GrammarError) for an unreadable file, an invalid
// schema or grammar, or both flags at once.
std::shared_ptr<TokenConstraint> load_constraint(const std::optional<std::string>& json_schema_file,
                                                 const std::optional<std::string>& grammar_file,
                                                 const Tokenizer& tokenizer);

}  // namespace peregrine::cli
