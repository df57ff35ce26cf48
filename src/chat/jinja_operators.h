#pragma once
// Python semantics of Jinja's binary operators: + - * / // % ** ~ == != < <= > >= in, not in
// ("and"/"or" short-circuit in the evaluator). Integer overflow, division by zero, and results
// over the size limits are EvalErrors, checked before anything large is allocated.
#include <string>

#include "chat/jinja_eval.h"
#include "chat/jinja_value.h"

namespace peregrine::chat {

Value binary_operator(const std::string& op, const Value& a, const Value& b, Budget& budget);

}  // namespace peregrine::chat
