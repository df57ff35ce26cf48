#pragma once
// What of a repository loads as the model: the folder itself (a checkpoint: config.json and
// safetensors), or one GGUF file, picked by its path, by a quantization matched against the GGUF
// file names ("Q4_K_M" picks "Llama-3.2-1B-Instruct-Q4_K_M.gguf"), or because it is the only one.
// The same rule picks what to load from a snapshot in the cache and what `pull` fetches.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::hub {

struct RepoEntry {
  std::string path;  // '/'-separated, relative to the repository
  uint64_t size = 0;
};

struct ModelChoice {
  bool folder = false;  // the repository is a checkpoint folder
  std::string file;     // else the file to load
  // Files of the repository the choice needs: every file for a folder, the one file otherwise.
  bool needs(std::string_view path) const { return folder || path == file; }
};

// Picks from `files` (a snapshot's or the hub's listing). `selector` is a file path or a
// quantization (empty: none given); `name` is the repository's name, for messages. Throws
// UsageError listing the choices when nothing or more than one thing matches.
ModelChoice choose_model(const std::vector<RepoEntry>& files, std::string_view selector, std::string_view name);

// The GGUF files a repository offers to run (projector files, mmproj-*, are left out).
std::vector<RepoEntry> model_gguf_files(const std::vector<RepoEntry>& files);

// "1.2 GiB", "870.4 MiB", "12.0 KiB", "17 B".
std::string human_bytes(uint64_t bytes);

}  // namespace peregrine::hub
