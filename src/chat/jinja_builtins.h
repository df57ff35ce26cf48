#pragma once
// Jinja's filters (`x | trim`), tests (`x is defined`) and the Python methods templates call on
// strings and dicts (`s.strip()`, `d.items()`), limited to what chat templates use. Each throws
// EvalError with a readable message on a bad argument or an unknown name.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_eval.h"
#include "chat/jinja_value.h"

namespace peregrine::chat {

using Kwargs = std::vector<std::pair<std::string, Value>>;

Value apply_filter(std::string_view name, const Value& subject, const std::vector<Value>& args,
                   const Kwargs& kwargs, Budget& budget);
bool apply_test(std::string_view name, const Value& subject, const std::vector<Value>& args);
Value call_method(const Value& object, std::string_view name, const std::vector<Value>& args,
                  const Kwargs& kwargs, Budget& budget);

// Python str.strip / lstrip / rstrip; `chars` empty = whitespace.
std::string strip(std::string_view s, std::string_view chars, bool left, bool right);

}  // namespace peregrine::chat
