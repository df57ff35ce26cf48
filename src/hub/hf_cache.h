#pragma once
// The Hugging Face hub cache, laid out as the `huggingface_hub` library lays it out, so that what
// either tool fetched the other uses:
//   CACHE/models--ORG--NAME/refs/REVISION                   the commit (40 hex, no newline)
//   CACHE/models--ORG--NAME/snapshots/COMMIT/PATH           a relative symlink to ../../blobs/ETAG
//   CACHE/models--ORG--NAME/blobs/ETAG                      the bytes (ETAG: sha256 for LFS files,
//                                                           the git blob sha1 for the others)
//   CACHE/models--ORG--NAME/blobs/ETAG.incomplete           a download in progress
//   CACHE/.locks/models--ORG--NAME/ETAG.lock                held while a blob is written
// A revision that is itself a commit has no ref file; "refs/pr/1" is refs/refs/pr/1.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hub/model_name.h"

namespace peregrine::hub {

// HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
// XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::filesystem::path hf_cache_dir();
// HF_HOME, else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface (where the token file is).
std::filesystem::path hf_home_dir();

bool is_commit_hash(std::string_view s);  // 40 lowercase hex digits

// One repository's folder in a cache.
class CacheRepo {
 public:
  CacheRepo(std::filesystem::path cache, std::string repo);
  // "models--ORG--NAME" for "ORG/NAME".
  static std::string folder_name(std::string_view repo);
  // "ORG/NAME" for "models--ORG--NAME"; nullopt for anything else (datasets--, spaces--, .locks).
  static std::optional<std::string> repo_of_folder(std::string_view folder);

  const std::string& repo() const { return repo_; }
  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path blob(std::string_view etag) const;
  std::filesystem::path incomplete(std::string_view etag) const;
  std::filesystem::path lock_file(std::string_view etag) const;
  std::filesystem::path snapshot(std::string_view commit) const;

  // The commit refs/REVISION holds; nullopt when there is no such ref. Throws FormatError when the
  // file holds something else than a commit.
  std::optional<std::string> read_ref(std::string_view revision) const;
  // Every ref under refs/ ("main", "refs/pr/1") and its commit, sorted by name.
  std::vector<std::pair<std::string, std::string>> refs() const;
  // Writes refs/REVISION = commit atomically (no newline, as huggingface_hub writes it).
  void write_ref(std::string_view revision, std::string_view commit) const;
  // Points snapshots/COMMIT/PATH at blobs/ETAG with a relative symlink, replacing any old link
  // atomically.
  void link(std::string_view commit, std::string_view path, std::string_view etag) const;

 private:
  std::string repo_;
  std::filesystem::path root_;
};

struct SnapshotFile {
  std::string path;   // relative to the snapshot, '/'-separated
  uint64_t size = 0;  // of the blob the link points to
};

struct Snapshot {
  std::string commit;
  std::filesystem::path dir;
  std::vector<SnapshotFile> files;  // the links whose blob is present, sorted by path
};

// The snapshot `name`'s revision points to in `cache`. Throws UsageError saying what is missing
// (the repository, the revision, the snapshot) and how to get it.
Snapshot find_snapshot(const std::filesystem::path& cache, const HubName& name);
// The files of a snapshot folder (links to absent blobs and .no_exist entries are left out).
std::vector<SnapshotFile> snapshot_files(const std::filesystem::path& dir);

}  // namespace peregrine::hub
