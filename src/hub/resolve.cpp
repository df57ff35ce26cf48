#include "hub/resolve.h"

#include "hub/hf_cache.h"
#include "hub/model_choice.h"
#include "hub/model_name.h"
#include "hub/ollama_store.h"

namespace peregrine::hub {
namespace {

ResolvedModel resolve_hub(const HubName& name) {
  const Snapshot snap = find_snapshot(hf_cache_dir(), name);
  std::vector<RepoEntry> files;
  for (const auto& f : snap.files) files.push_back({f.path, f.size});
  const ModelChoice choice = choose_model(files, name.selector, name.repo);
  ResolvedModel r;
  r.path = choice.folder ? snap.dir : snap.dir / choice.file;
  r.display_name = name.repo;
  r.origin = "Hugging Face cache, commit " + snap.commit.substr(0, 7);
  return r;
}

ResolvedModel resolve_ollama(const OllamaName& name) {
  const OllamaModel m = find_ollama_model(ollama_store_dir(), name);
  return {m.gguf, name.text().substr(7), "Ollama store, " + m.digest.substr(0, 19)};
}

}  // namespace

std::optional<ResolvedModel> resolve_model_name(std::string_view arg) {
  std::optional<ModelName> name = parse_model_name(arg);
  if (!name) return std::nullopt;
  if (const auto* hub = std::get_if<HubName>(&*name)) return resolve_hub(*hub);
  return resolve_ollama(std::get<OllamaName>(*name));
}

}  // namespace peregrine::hub
