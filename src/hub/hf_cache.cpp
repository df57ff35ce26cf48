#include "hub/hf_cache.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace peregrine::hub {
namespace fs = std::filesystem;
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

fs::path home_dir() {
  if (auto h = env("HOME")) return *h;
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) return pw->pw_dir;
  return "/";
}

// A name for a temporary file beside `target`, unique in this process and across processes.
fs::path temporary_beside(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  return target.parent_path() /
         ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

fs::path hf_home_dir() {
  if (auto h = env("HF_HOME")) return *h;
  if (auto x = env("XDG_CACHE_HOME")) return fs::path(*x) / "huggingface";
  return home_dir() / ".cache" / "huggingface";
}

fs::path hf_cache_dir() {
  if (auto c = env("HF_HUB_CACHE")) return *c;
  if (auto c = env("HUGGINGFACE_HUB_CACHE")) return *c;
  return hf_home_dir() / "hub";
}

bool is_commit_hash(std::string_view s) {
  return s.size() == 40 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

CacheRepo::CacheRepo(fs::path cache, std::string repo)
    : repo_(std::move(repo)), root_(std::move(cache) / folder_name(repo_)) {}

std::string CacheRepo::folder_name(std::string_view repo) {
  std::string out = "models--";
  for (char c : repo) out += c == '/' ? std::string("--") : std::string(1, c);
  return out;
}

std::optional<std::string> CacheRepo::repo_of_folder(std::string_view folder) {
  constexpr std::string_view prefix = "models--";
  if (!folder.starts_with(prefix)) return std::nullopt;
  folder.remove_prefix(prefix.size());
  const size_t sep = folder.find("--");
  if (sep == std::string_view::npos || sep == 0 || sep + 2 >= folder.size()) return std::nullopt;
  return std::string(folder.substr(0, sep)) + "/" + std::string(folder.substr(sep + 2));
}

fs::path CacheRepo::blob(std::string_view etag) const { return root_ / "blobs" / std::string(etag); }
fs::path CacheRepo::incomplete(std::string_view etag) const {
  return root_ / "blobs" / (std::string(etag) + ".incomplete");
}
fs::path CacheRepo::lock_file(std::string_view etag) const {
  return root_.parent_path() / ".locks" / root_.filename() / (std::string(etag) + ".lock");
}
fs::path CacheRepo::snapshot(std::string_view commit) const { return root_ / "snapshots" / std::string(commit); }

std::optional<std::string> CacheRepo::read_ref(std::string_view revision) const {
  const fs::path file = root_ / "refs" / std::string(revision);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  std::string text(64, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (!is_commit_hash(text)) throw FormatError(file.string() + ": does not hold a commit hash");
  return text;
}

std::vector<std::pair<std::string, std::string>> CacheRepo::refs() const {
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root_ / "refs", ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().lexically_relative(root_ / "refs").generic_string();
    try {
      if (auto commit = read_ref(name)) out.emplace_back(name, *commit);
    } catch (const FormatError&) {
      // A ref file that holds no commit (written by something else) names nothing: leave it out.
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CacheRepo::write_ref(std::string_view revision, std::string_view commit) const {
  const fs::path file = root_ / "refs" / std::string(revision);
  fs::create_directories(file.parent_path());
  const fs::path tmp = temporary_beside(file);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out.flush()) throw std::runtime_error(tmp.string() + ": cannot write the ref");
  }
  fs::rename(tmp, file);
}

void CacheRepo::link(std::string_view commit, std::string_view path, std::string_view etag) const {
  const fs::path file = snapshot(commit) / std::string(path);
  fs::create_directories(file.parent_path());
  // snapshots/COMMIT/a/b -> ../../../blobs/ETAG: one "../" per folder between the link and root_.
  std::string target;
  const size_t depth = 2 + static_cast<size_t>(std::count(path.begin(), path.end(), '/'));
  for (size_t i = 0; i < depth; ++i) target += "../";
  target += "blobs/" + std::string(etag);
  const fs::path tmp = temporary_beside(file);
  fs::create_symlink(target, tmp);
  fs::rename(tmp, file);
}

std::vector<SnapshotFile> snapshot_files(const fs::path& dir) {
  std::vector<SnapshotFile> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec;
    if (!fs::is_regular_file(it->path(), file_ec)) continue;  // follows the link: absent blobs are left out
    const uint64_t size = fs::file_size(it->path(), file_ec);
    if (file_ec) continue;
    out.push_back({it->path().lexically_relative(dir).generic_string(), size});
  }
  std::sort(out.begin(), out.end(), [](const SnapshotFile& a, const SnapshotFile& b) { return a.path < b.path; });
  return out;
}

Snapshot find_snapshot(const fs::path& cache, const HubName& name) {
  const CacheRepo repo(cache, name.repo);
  const std::string get = "fetch it with `peregrine pull " + name.repo +
                          (name.revision_given ? "@" + name.revision : "") + "` (or `huggingface-cli download " +
                          name.repo + (name.revision_given ? " --revision " + name.revision : "") + "`)";
  std::error_code ec;
  if (!fs::is_directory(repo.root(), ec))
    throw UsageError(name.repo + " is not in the Hugging Face cache (" + cache.string() + "): " + get);
  std::optional<std::string> commit;
  if (is_commit_hash(name.revision) && fs::is_directory(repo.snapshot(name.revision), ec)) commit = name.revision;
  if (!commit) commit = repo.read_ref(name.revision);
  if (!commit) {
    std::vector<std::string> have;
    for (const auto& [ref, _] : repo.refs()) have.push_back(ref);
    throw UsageError(name.repo + " has no revision '" + name.revision +
                     "' in the Hugging Face cache (it has: " + quoted_list(have) + "): " + get);
  }
  Snapshot s{*commit, repo.snapshot(*commit), {}};
  if (!fs::is_directory(s.dir, ec))
    throw UsageError(name.repo + "@" + name.revision + " points to commit " + *commit +
                     ", whose snapshot is not in the cache: " + get);
  s.files = snapshot_files(s.dir);
  return s;
}

}  // namespace peregrine::hub
