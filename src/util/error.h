#pragma once
// Errors that cross module edges. Every problem with user input (a model file, a prompt, a CLI
// flag) is reported as one of these with a message a user can act on; main() prints it and exits
// non-zero. Nothing user-facing aborts or asserts.
#include <stdexcept>
#include <string>

namespace peregrine {

// A model, tokenizer or data file is malformed or unsupported. The message names the file and
// the problem, e.g. "model.gguf: tensor 'blk.0.attn_q.weight' data ends past end of file".
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed an invalid argument (bad flag value, prompt too long for the context, ...).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace peregrine
