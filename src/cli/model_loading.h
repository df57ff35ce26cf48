#pragma once
// How the CLI finds and opens a model: an explicit path (GGUF, or a llama2.c checkpoint with
// --tokenizer), or, with no path, the demo model embedded in the binary (models/demo-target.gguf).
#include <optional>
#include <string>

#include "format/model_file.h"

namespace peregrine::cli {

// Opens the model named on the command line. Throws UsageError when no model is given and none
// is embedded, FormatError for a bad file.
ModelFile open_model_arg(const std::optional<std::string>& path,
                         const std::optional<std::string>& tokenizer);

// Reads a whole file's bytes exactly (no newline handling). Throws UsageError if unreadable.
std::string read_file_bytes(const std::string& path);

}  // namespace peregrine::cli
