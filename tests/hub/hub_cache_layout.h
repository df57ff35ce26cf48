#pragma once
// Lays out a Hugging Face hub cache the way huggingface_hub writes one (its documented layout, not
// our writer): blobs named by sha256 (LFS files) or git blob id (others), relative symlinks from
// snapshots/COMMIT/, refs/REVISION holding the commit with no newline, and the extras real caches
// carry (.locks/, CACHEDIR.TAG, version.txt, .no_exist/, a leftover *.incomplete).
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "hub/local_hub.h"

namespace peregrine::test {

inline void lay_hf_repo(const std::filesystem::path& cache, const std::string& repo, const std::string& commit,
                        const std::vector<std::pair<std::string, std::filesystem::path>>& files,
                        const std::vector<std::string>& refs = {"main"}) {
  namespace fs = std::filesystem;
  std::string folder = "models--" + repo;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path root = cache / folder;
  fs::create_directories(root / "blobs");
  fs::create_directories(cache / ".locks" / folder);
  std::ofstream(cache / "CACHEDIR.TAG") << "Signature: 8a477f597d28d172789f06886806bc55\n";
  std::ofstream(cache / "version.txt") << "1";
  for (const auto& [path, disk] : files) {
    const bool lfs = path.ends_with(".gguf") || path.ends_with(".safetensors");
    const std::string etag = lfs ? sha256_of(disk) : git_blob_id_of(disk);
    fs::copy_file(disk, root / "blobs" / etag, fs::copy_options::overwrite_existing);
    const fs::path link = root / "snapshots" / commit / path;
    fs::create_directories(link.parent_path());
    std::string target;
    for (size_t i = 0; i < 2 + static_cast<size_t>(std::count(path.begin(), path.end(), '/')); ++i) target += "../";
    fs::remove(link);
    fs::create_symlink(target + "blobs/" + etag, link);
  }
  for (const auto& ref : refs) {
    fs::create_directories((root / "refs" / ref).parent_path());
    std::ofstream(root / "refs" / ref, std::ios::binary) << commit;
  }
  fs::create_directories(root / ".no_exist" / commit);
  std::ofstream(root / ".no_exist" / commit / "generation_config.json");
  std::ofstream(root / "blobs" / "0000000000000000000000000000000000000000000000000000000000000000.incomplete")
      << "part";
}

}  // namespace peregrine::test
