#pragma once
// A MODEL argument to what the loaders open: a path that exists is itself; a name
// (hub/model_name.h) is looked up in the Hugging Face cache or Ollama's store.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace peregrine::hub {

struct ResolvedModel {
  std::filesystem::path path;  // the GGUF file or checkpoint folder to open
  std::string display_name;    // the name people use for it: "ORG/NAME", "llama3.2:latest"
  std::string origin;          // where it was found, for messages: "Hugging Face cache, commit 1a2b3c4"
};

// nullopt when `arg` is not a name (the caller treats it as a path, which does not exist).
// Throws UsageError when it is a name the caches do not hold (saying how to fetch it) or that
// matches nothing or several things in its repository (listing them), FormatError for a broken
// store entry.
std::optional<ResolvedModel> resolve_model_name(std::string_view arg);

}  // namespace peregrine::hub
