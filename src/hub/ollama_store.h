#pragma once
// Ollama's model store, read-only:
//   STORE/manifests/HOST/NAMESPACE/MODEL/TAG   a Docker v2 manifest (JSON): config + layers, each
//                                              {mediaType, digest "sha256:HEX", size}
//   STORE/blobs/sha256-HEX                     the layers' bytes (older versions: sha256:HEX)
// The model is the layer of type application/vnd.ollama.image.model: a GGUF (projector and
// adapter layers are GGUFs too, so it is picked by type, never by position).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/model_name.h"

namespace peregrine::hub {

// OLLAMA_MODELS, else ~/.ollama/models.
std::filesystem::path ollama_store_dir();

struct OllamaModel {
  OllamaName name;
  std::filesystem::path manifest;
  std::filesystem::path gguf;  // the model layer's blob
  uint64_t size = 0;           // its size, as the manifest says and the blob is
  std::string digest;          // "sha256:HEX"
};

// Finds `name`'s model blob. Throws UsageError when the model or tag is not in the store, and
// FormatError naming the manifest when it is malformed, has no model layer (models stored as
// tensor layers), carries an adapter (LoRA) peregrine would not apply, or its blob is missing or
// of another size.
OllamaModel find_ollama_model(const std::filesystem::path& store, const OllamaName& name);

// Every name with a manifest in the store, sorted.
std::vector<OllamaName> ollama_names(const std::filesystem::path& store);

}  // namespace peregrine::hub
