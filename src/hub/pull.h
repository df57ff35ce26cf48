#pragma once
// `peregrine pull`: a repository's files from a hub into the Hugging Face cache, in the layout
// huggingface_hub writes (hub/hf_cache.h). One model-info call fixes the commit, so a branch that
// moves meanwhile cannot mix two commits; the files come in parallel (a bounded number at once),
// each checked before it becomes visible (hub/blob_download.h); the ref is written last, only when
// every file is in place, so a name never resolves to a half-fetched snapshot.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "hub/http_client.h"
#include "hub/hub_api.h"
#include "hub/model_name.h"

namespace peregrine::hub {

struct PullOptions {
  HubName name;
  // fnmatch globs over the repository's paths ('*' also matches '/', as huggingface-cli's
  // --include does); empty: what the name chooses (hub/model_choice.h).
  std::vector<std::string> include;
  int jobs = 4;  // files downloaded at once
  int attempts = 3;
  int retry_delay_ms = 250;
  HttpTimeouts timeouts;
  std::filesystem::path cache;  // the hub cache to write
  HubEndpoint hub;
  std::function<void(uint64_t done, uint64_t total)> progress;  // from any thread, serialized
};

struct PullResult {
  std::string commit;
  std::vector<RemoteFile> files;      // chosen
  uint64_t bytes = 0;                 // their size
  uint64_t fetched = 0;               // bytes that came over the network this time
  std::vector<std::string> failures;  // "PATH: why", one per file that is not in place
  std::filesystem::path snapshot;
};

// Throws HubError when the repository cannot be listed or the disk cannot hold the files,
// UsageError when the name or the globs choose nothing (or more than one model). Files that fail
// are reported in PullResult::failures; the others are in place.
PullResult pull(const PullOptions& options);

// The files of `info` that `name` and `include` choose (see PullOptions::include).
std::vector<RemoteFile> choose_files(const std::vector<RemoteFile>& files, const HubName& name,
                                     const std::vector<std::string>& include);

}  // namespace peregrine::hub
