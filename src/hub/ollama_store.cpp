#include "hub/ollama_store.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "format/json_file.h"
#include "util/error.h"

namespace peregrine::hub {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxManifestBytes = 1 << 20;
constexpr std::string_view kModelLayer = "application/vnd.ollama.image.model";
constexpr std::string_view kAdapterLayer = "application/vnd.ollama.image.adapter";

bool is_sha256_digest(const std::string& d) {
  return d.size() == 71 && d.starts_with("sha256:") &&
         std::all_of(d.begin() + 7, d.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

fs::path manifest_path(const fs::path& store, const OllamaName& n) {
  return store / "manifests" / n.host / n.ns / n.model / n.tag;
}

// Tags of `name`'s model in the store, for the message when the asked one is missing.
std::vector<std::string> tags_of(const fs::path& store, const OllamaName& n) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(store / "manifests" / n.host / n.ns / n.model, ec), end; !ec && it != end;
       it.increment(ec))
    if (it->is_regular_file(ec)) out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The model layer (by media type); FormatError when there is none or the manifest is malformed.
const nlohmann::json& model_layer(const nlohmann::json& manifest, const std::string& file) {
  if (!manifest.is_object() || !manifest.contains("layers") || !manifest["layers"].is_array())
    throw FormatError(file + ": not an Ollama manifest (no \"layers\" list)");
  const nlohmann::json* found = nullptr;
  bool tensor_layers = false;
  for (const auto& layer : manifest["layers"]) {
    if (!layer.is_object() || !layer.contains("mediaType") || !layer["mediaType"].is_string()) continue;
    const std::string type = layer["mediaType"];
    if (type == kAdapterLayer)
      throw FormatError(file + ": the model carries an adapter (LoRA) layer, which peregrine does not apply");
    if (type == kModelLayer) {
      if (found != nullptr) throw FormatError(file + ": more than one model layer");
      found = &layer;
    }
    if (type.find("image.tensor") != std::string::npos) tensor_layers = true;
  }
  if (found == nullptr)
    throw FormatError(file + (tensor_layers ? ": the model is stored as tensor layers, not one GGUF; peregrine reads "
                                              "only models with a GGUF model layer"
                                            : ": no layer of type application/vnd.ollama.image.model"));
  return *found;
}

}  // namespace

fs::path ollama_store_dir() {
  if (const char* m = std::getenv("OLLAMA_MODELS"); m != nullptr && *m != '\0') return m;
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr && *home != '\0' ? home : "/") / ".ollama" / "models";
}

OllamaModel find_ollama_model(const fs::path& store, const OllamaName& name) {
  OllamaModel m{name, manifest_path(store, name), {}, 0, {}};
  std::error_code ec;
  if (!fs::is_regular_file(m.manifest, ec)) {
    const auto tags = tags_of(store, name);
    std::string have;
    for (const auto& t : tags) have += (have.empty() ? "" : ", ") + t;
    if (!tags.empty())
      throw UsageError(name.text() + " is not in Ollama's store (" + store.string() + "); its tags there: " + have);
    throw UsageError(name.text() + " is not in Ollama's store (" + store.string() + "): fetch it with `ollama pull " +
                     name.text().substr(7) + "` (or set OLLAMA_MODELS to the store's folder)");
  }
  const std::string file = m.manifest.string();
  const nlohmann::json manifest = read_json_file(m.manifest, kMaxManifestBytes);
  const nlohmann::json& layer = model_layer(manifest, file);
  if (!layer.contains("digest") || !layer["digest"].is_string() || !is_sha256_digest(layer["digest"]))
    throw FormatError(file + ": the model layer's digest is not sha256:<64 hex digits>");
  if (!layer.contains("size") || !layer["size"].is_number_unsigned())
    throw FormatError(file + ": the model layer has no size");
  m.digest = layer["digest"];
  m.size = layer["size"];
  const std::string hex = m.digest.substr(7);
  for (const std::string& blob : {"sha256-" + hex, "sha256:" + hex}) {
    if (fs::is_regular_file(store / "blobs" / blob, ec)) {
      m.gguf = store / "blobs" / blob;
      break;
    }
  }
  if (m.gguf.empty())
    throw FormatError(file + ": the model blob " + m.digest + " is missing from " + (store / "blobs").string());
  if (const uint64_t on_disk = fs::file_size(m.gguf, ec); ec || on_disk != m.size)
    throw FormatError(file + ": the model blob " + m.gguf.string() + " has " + std::to_string(on_disk) +
                      " bytes, the manifest says " + std::to_string(m.size) + " (an interrupted pull?)");
  return m;
}

std::vector<OllamaName> ollama_names(const fs::path& store) {
  std::vector<OllamaName> out;
  const fs::path root = store / "manifests";
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it.depth() != 3 || !it->is_regular_file(ec)) continue;
    const fs::path rel = it->path().lexically_relative(root);
    std::vector<std::string> parts;
    for (const auto& p : rel) parts.push_back(p.string());
    if (parts.size() != 4) continue;
    out.push_back(OllamaName{parts[0], parts[1], parts[2], parts[3]});
  }
  std::sort(out.begin(), out.end(), [](const OllamaName& a, const OllamaName& b) { return a.text() < b.text(); });
  return out;
}

}  // namespace peregrine::hub
