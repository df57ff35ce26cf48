#include "hub/hub_api.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hub/hf_cache.h"
#include "hub/model_name.h"
#include "util/error.h"

namespace peregrine::hub {
namespace {

constexpr size_t kMaxInfoBytes = 64u << 20;  // a model's file list; the largest repositories list ~100k files
constexpr size_t kMaxFiles = 100000;

std::optional<std::string> read_token_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::string token(4096, '\0');
  in.read(token.data(), static_cast<std::streamsize>(token.size()));
  token.resize(static_cast<size_t>(in.gcount()));
  token.erase(std::remove_if(token.begin(), token.end(), [](unsigned char c) { return std::isspace(c); }), token.end());
  return token;
}

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string status_text(long status) {
  switch (status) {
    case 400:
      return "400 Bad Request";
    case 401:
      return "401 Unauthorized";
    case 403:
      return "403 Forbidden";
    case 404:
      return "404 Not Found";
    case 416:
      return "416 Range Not Satisfiable";
    case 429:
      return "429 Too Many Requests";
    case 500:
      return "500 Internal Server Error";
    case 502:
      return "502 Bad Gateway";
    case 503:
      return "503 Service Unavailable";
    case 504:
      return "504 Gateway Timeout";
    default:
      return "HTTP status " + std::to_string(status);
  }
}

// One sibling of the model info; HubError when it is not what the hub sends.
RemoteFile read_sibling(const nlohmann::json& s, const std::string& where) {
  auto bad = [&](const std::string& why) { return HubError(where + ": the hub's file list is malformed: " + why); };
  if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) throw bad("a file without a name");
  RemoteFile f;
  f.path = s["rfilename"];
  if (!is_safe_relative_path(f.path)) throw bad("the file name '" + f.path + "' leaves the repository");
  if (!s.contains("size") || !s["size"].is_number_unsigned()) throw bad(f.path + " has no size");
  f.size = s["size"];
  if (!s.contains("blobId") || !s["blobId"].is_string() || !is_hex(s["blobId"].get<std::string>(), 40))
    throw bad(f.path + " has no blobId");
  f.blob_id = s["blobId"];
  if (s.contains("lfs") && s["lfs"].is_object()) {
    const auto& lfs = s["lfs"];
    if (!lfs.contains("sha256") || !lfs["sha256"].is_string() || !is_hex(lfs["sha256"].get<std::string>(), 64))
      throw bad(f.path + " is an LFS file without a sha256");
    f.sha256 = lfs["sha256"];
    if (lfs.contains("size") && lfs["size"].is_number_unsigned()) f.size = lfs["size"];
  }
  std::transform(f.blob_id.begin(), f.blob_id.end(), f.blob_id.begin(), ::tolower);
  std::transform(f.sha256.begin(), f.sha256.end(), f.sha256.begin(), ::tolower);
  return f;
}

}  // namespace

std::vector<std::string> HubEndpoint::auth_headers() const {
  if (!token) return {};
  return {"Authorization: Bearer " + *token};
}

HubEndpoint hub_endpoint_from_env(const std::optional<std::filesystem::path>& token_file) {
  HubEndpoint hub;
  if (const char* e = std::getenv("HF_ENDPOINT"); e != nullptr && *e != '\0') hub.base = e;
  while (hub.base.ends_with('/')) hub.base.pop_back();
  if (token_file) {
    hub.token = read_token_file(*token_file);
    if (!hub.token) throw UsageError("cannot read the token file " + token_file->string());
  } else if (const char* t = std::getenv("HF_TOKEN"); t != nullptr && *t != '\0') {
    hub.token = t;
  } else {
    const char* path = std::getenv("HF_TOKEN_PATH");
    hub.token =
        read_token_file(path != nullptr && *path != '\0' ? std::filesystem::path(path) : hf_home_dir() / "token");
  }
  if (hub.token && hub.token->empty()) hub.token.reset();
  return hub;
}

std::string resolve_url(const HubEndpoint& hub, const std::string& repo, const std::string& commit,
                        const std::string& path) {
  return hub.base + "/" + repo + "/resolve/" + url_encode(commit, false) + "/" + url_encode(path, true);
}

std::string describe_failure(const HttpResponse& response, bool have_token) {
  const long status = response.status();
  const std::string code = response.header("x-error-code"), message = response.header("x-error-message");
  std::string out = status_text(status);
  if (!code.empty()) out += " (" + code + (message.empty() ? "" : ": " + message) + ")";
  if (code == "GatedRepo") {
    out += have_token ? "; your token has no access to this gated model: accept its terms on the hub"
                      : "; a gated model: accept its terms on the hub, then set HF_TOKEN or pass --token-file";
  } else if (code == "RepoNotFound" || (status == 401 && code.empty())) {
    out += have_token ? (status == 401 ? "; is the token valid?" : "; no such repository, or your token cannot see it")
                      : "; no such repository, or a private one (set HF_TOKEN or pass --token-file)";
  }
  return out;
}

RepoInfo fetch_repo_info(HttpSession& http, const HubEndpoint& hub, const std::string& repo,
                         const std::string& revision) {
  const std::string where = repo + "@" + revision;
  const std::string url = hub.base + "/api/models/" + repo + "/revision/" + url_encode(revision, false) + "?blobs=true";
  std::vector<std::string> headers = hub.auth_headers();
  headers.push_back("Accept: application/json");
  HttpResponse r;
  try {
    r = http.get(url, headers, kMaxInfoBytes);
  } catch (const TransferError& e) {
    throw HubError(where + ": cannot get the file list from " + hub.base + ": " + e.what());
  }
  if (r.status() != 200) throw HubError(where + ": the file list: " + describe_failure(r, hub.token.has_value()));
  const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw HubError(where + ": the hub's answer is not JSON");
  RepoInfo info;
  if (!j.contains("sha") || !j["sha"].is_string() || !is_commit_hash(j["sha"].get<std::string>()))
    throw HubError(where + ": the hub's answer has no commit hash (\"sha\")");
  info.commit = j["sha"];
  info.gated = j.contains("gated") && j["gated"].is_string();
  if (!j.contains("siblings") || !j["siblings"].is_array()) throw HubError(where + ": the hub's answer lists no files");
  if (j["siblings"].size() > kMaxFiles) throw HubError(where + ": more than 100000 files");
  for (const auto& s : j["siblings"]) info.files.push_back(read_sibling(s, where));
  return info;
}

}  // namespace peregrine::hub
