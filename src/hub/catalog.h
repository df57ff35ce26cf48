#pragma once
// What the model stores on this machine hold, for `peregrine list`: each runnable thing in the
// Hugging Face cache (a checkpoint folder, or each GGUF file of a repository that has several) and
// in Ollama's store, with the name that runs it, its size, architecture and weight type.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace peregrine::hub {

struct CatalogEntry {
  std::string name;      // what to pass as MODEL
  std::string source;    // "hf" or "ollama"
  std::string revision;  // the refs naming the snapshot ("main", "main v1.0"), else its short commit
  std::string commit;    // hf: the snapshot's commit; ollama: the model layer's digest
  size_t files = 0;      // files it loads from (a folder: all of the snapshot's)
  uint64_t bytes = 0;
  std::string architecture;  // general.architecture, or config.json's model_type
  std::string type;          // "gguf q4_K, q6_K", "safetensors bf16", or why it cannot run
  std::filesystem::path path;
};

std::vector<CatalogEntry> list_hf_cache(const std::filesystem::path& cache);
std::vector<CatalogEntry> list_ollama_store(const std::filesystem::path& store);

}  // namespace peregrine::hub
