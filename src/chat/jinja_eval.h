#pragma once
// Renders a parsed template. Every render is bounded (output bytes, evaluation steps, bytes of
// values created, list lengths) so a hostile template -- `--chat-template FILE` -- cannot hang
// the server or exhaust its memory; exceeding a bound is a ChatTemplateError naming it.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace peregrine::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;   // the rendered prompt, and any single string
  size_t max_created_bytes = size_t{512} << 20;  // all strings and lists built while rendering
  size_t max_list_items = size_t{1} << 20;       // range(), list repetition, ...
  uint64_t max_steps = 20'000'000;               // statements + expressions evaluated
};

struct RenderOptions {
  RenderLimits limits;
  std::optional<std::time_t> now;  // strftime_now's clock; unset = the real time
};

// A runtime error without a position yet; the evaluator prefixes "chat template:LINE:COL: "
// of the expression it was evaluating and rethrows it as ChatTemplateError.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Accounting shared by the evaluator and the builtins.
class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}
  const RenderLimits& limits() const { return limits_; }
  // Called before building a string of n bytes: throws if it is over the size limit, and
  // charges it against the created-bytes budget.
  void charge_string(size_t n);
  // Same for a list of n items.
  void charge_list(size_t n);
  void step() {
    if (++steps_ > limits_.max_steps)
      throw EvalError("chat template: evaluation step limit exceeded (" +
                      std::to_string(limits_.max_steps) + "); does the template loop forever?");
  }

 private:
  RenderLimits limits_;
  size_t created_ = 0;
  uint64_t steps_ = 0;
};

// Renders with `context` as the global variables (messages, bos_token, ...).
std::string render(const Template& tmpl, const Dict& context, const RenderOptions& options);

}  // namespace peregrine::chat
