#pragma once
// The Hugging Face hub's HTTP API, the part a downloader needs:
//   GET ENDPOINT/api/models/REPO/revision/REV?blobs=true   the commit ("sha") and the files
//       ("siblings": rfilename, size, blobId, lfs {sha256, size})
//   GET ENDPOINT/REPO/resolve/COMMIT/PATH                  a file: small ones directly, LFS ones as
//       a redirect to a CDN whose own headers carry X-Linked-Etag (the sha256) and X-Linked-Size
// Errors carry X-Error-Code: GatedRepo (401 without a token, 403 with one lacking access),
// RepoNotFound (401 anonymous, 404 with a token), RevisionNotFound, EntryNotFound (404).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hub/http_client.h"

namespace peregrine::hub {

// The hub refused or failed a request; the message names what was asked and the status.
class HubError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HubEndpoint {
  std::string base = "https://huggingface.co";  // no trailing '/'
  std::optional<std::string> token;

  // "Authorization: Bearer TOKEN" when there is a token.
  std::vector<std::string> auth_headers() const;
};

// HF_ENDPOINT (default the public hub) and the token: from `token_file` when given, else HF_TOKEN,
// else the file HF_TOKEN_PATH or HF_HOME/token that `huggingface-cli login` writes. Throws
// UsageError when `token_file` cannot be read.
HubEndpoint hub_endpoint_from_env(const std::optional<std::filesystem::path>& token_file);

struct RemoteFile {
  std::string path;  // rfilename, checked to stay inside the repository
  uint64_t size = 0;
  std::string blob_id;  // the git blob sha1
  std::string sha256;   // LFS files only; empty otherwise
  bool lfs() const { return !sha256.empty(); }
  // The blob's name in the cache: the sha256 for LFS files, the git blob id for the others.
  const std::string& etag() const { return lfs() ? sha256 : blob_id; }
};

struct RepoInfo {
  std::string commit;
  std::vector<RemoteFile> files;
  bool gated = false;
};

// The repository's commit for `revision` and its files. Throws HubError naming the repository and
// the status (and what to do: a token for gated or private repositories).
RepoInfo fetch_repo_info(HttpSession& http, const HubEndpoint& hub, const std::string& repo,
                         const std::string& revision);

// ENDPOINT/REPO/resolve/COMMIT/PATH, the revision and path percent-encoded ('/' kept in the path).
std::string resolve_url(const HubEndpoint& hub, const std::string& repo, const std::string& commit,
                        const std::string& path);

// "401 Unauthorized (GatedRepo: ...)": a failed answer's status and the hub's own words, with advice
// for the statuses a user can act on.
std::string describe_failure(const HttpResponse& response, bool have_token);

}  // namespace peregrine::hub
