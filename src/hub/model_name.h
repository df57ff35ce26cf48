#pragma once
// How a MODEL argument that is not a path names a model another tool keeps:
//   ORG/NAME[@REVISION][:FILE|:QUANT]      a Hugging Face repository, from the hub cache
//   hf:ORG/NAME[@REVISION][:FILE|:QUANT]   the same, said explicitly
//   ollama:[[HOST/]NAMESPACE/]MODEL[:TAG]  a model in Ollama's store
// The text after ':' picks what to load from a repository: a file's path in it, or a quantization
// (Q4_K_M, q8_0: llama.cpp's `-hf ORG/NAME:QUANT` form) matched against its GGUF file names.
// Every part is checked here against what the hub and Ollama allow, so no part of a name can step
// out of the folders it is joined to.
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace peregrine::hub {

struct HubName {
  std::string repo;  // "ORG/NAME"
  std::string revision = "main";
  bool revision_given = false;  // "@REV" was written
  std::string selector;         // FILE or QUANT after ':'; empty when none
  // "ORG/NAME[@REV][:SELECTOR]" as written.
  std::string text() const;
};

struct OllamaName {
  std::string host = "registry.ollama.ai";
  std::string ns = "library";
  std::string model;
  std::string tag = "latest";
  // "ollama:MODEL:TAG" for the default host and namespace, "ollama:HOST/NS/MODEL:TAG" otherwise.
  std::string text() const;
};

using ModelName = std::variant<HubName, OllamaName>;

// Reads `arg` as a model name; nullopt when it is not one (a path). Throws UsageError when the text
// says it is a name ("hf:", "ollama:") but is malformed.
std::optional<ModelName> parse_model_name(std::string_view arg);

// Reads a Hugging Face name (with or without "hf:"), for `pull`. Throws UsageError saying what is
// wrong with it.
HubName parse_hub_name(std::string_view arg);

// Whether `path` is a relative path inside a folder: no leading '/', no empty, "." or ".."
// component, no NUL. File names from the hub's API and from names go through it before any join.
bool is_safe_relative_path(std::string_view path);

}  // namespace peregrine::hub
