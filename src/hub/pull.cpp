#include "hub/pull.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "hub/blob_download.h"
#include "hub/hf_cache.h"
#include "hub/model_choice.h"
#include "util/error.h"

namespace peregrine::hub {
namespace fs = std::filesystem;
namespace {

// An exclusive flock on a file in .locks/, as huggingface_hub's FileLock takes it, so two pulls
// (of either tool) never write one blob at once.
class BlobLock {
 public:
  explicit BlobLock(const fs::path& file) {
    fs::create_directories(file.parent_path());
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw HubError("cannot create the lock file " + file.string());
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~BlobLock() { ::close(fd_); }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

bool has_size(const fs::path& p, uint64_t size) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) == size && !ec;
}

// Bytes the files still need on disk: what is neither a blob nor a partial download yet.
uint64_t bytes_missing(const CacheRepo& repo, const std::vector<RemoteFile>& files) {
  uint64_t need = 0;
  for (const auto& f : files) {
    if (has_size(repo.blob(f.etag()), f.size)) continue;
    std::error_code ec;
    const uint64_t part = fs::exists(repo.incomplete(f.etag()), ec) ? fs::file_size(repo.incomplete(f.etag()), ec) : 0;
    need += f.size - std::min(part, f.size);
  }
  return need;
}

void check_free_space(const fs::path& dir, uint64_t need) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;
  const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (need > free)
    throw HubError("the files need " + human_bytes(need) + " more, and " + dir.string() + " has " + human_bytes(free) +
                   " free");
}

// Puts one file into the snapshot: a link to its blob, downloaded first if missing.
void place_file(HttpSession& http, const BlobSource& src, const CacheRepo& repo, const RemoteFile& f,
                TransferTally& tally) {
  if (has_size(repo.snapshot(src.commit) / f.path, f.size)) {
    tally.add_done(static_cast<int64_t>(f.size));
    return;
  }
  {
    const BlobLock lock(repo.lock_file(f.etag()));
    if (has_size(repo.blob(f.etag()), f.size))
      tally.add_done(static_cast<int64_t>(f.size));
    else
      download_blob(http, src, repo, f, tally);
  }
  repo.link(src.commit, f.path, f.etag());
}

}  // namespace

std::vector<RemoteFile> choose_files(const std::vector<RemoteFile>& files, const HubName& name,
                                     const std::vector<std::string>& include) {
  std::vector<RemoteFile> out;
  if (!include.empty()) {
    if (!name.selector.empty()) throw UsageError("give either " + name.repo + ":FILE|QUANT or --include, not both");
    for (const auto& f : files)
      for (const auto& glob : include)
        if (::fnmatch(glob.c_str(), f.path.c_str(), 0) == 0) {
          out.push_back(f);
          break;
        }
    if (out.empty()) throw UsageError("no file of " + name.repo + " matches --include");
    return out;
  }
  std::vector<RepoEntry> entries;
  for (const auto& f : files) entries.push_back({f.path, f.size});
  const ModelChoice choice = choose_model(entries, name.selector, name.repo);  // throws when ambiguous
  for (const auto& f : files)
    if (name.selector.empty() || choice.needs(f.path)) out.push_back(f);
  return out;
}

PullResult pull(const PullOptions& o) {
  HttpSession http(o.timeouts);
  const RepoInfo info = fetch_repo_info(http, o.hub, o.name.repo, o.name.revision);
  PullResult result;
  result.commit = info.commit;
  result.files = choose_files(info.files, o.name, o.include);
  for (const auto& f : result.files) result.bytes += f.size;
  const CacheRepo repo(o.cache, o.name.repo);
  result.snapshot = repo.snapshot(info.commit);
  fs::create_directories(repo.root() / "blobs");
  fs::create_directories(result.snapshot);
  check_free_space(repo.root() / "blobs", bytes_missing(repo, result.files));

  TransferTally tally(o.progress);
  tally.add_total(result.bytes);
  const BlobSource src{&o.hub, o.name.repo, info.commit, o.attempts, o.retry_delay_ms};
  std::atomic<size_t> next{0};
  std::mutex failures_mutex;
  const auto worker = [&](HttpSession& session) {
    for (size_t i; (i = next++) < result.files.size();) {
      try {
        place_file(session, src, repo, result.files[i], tally);
      } catch (const std::exception& e) {
        std::lock_guard lock(failures_mutex);
        const std::string what = e.what();
        result.failures.push_back(what.starts_with(result.files[i].path + ":") ? what
                                                                               : result.files[i].path + ": " + what);
      }
    }
  };
  {
    const size_t n = std::min<size_t>(static_cast<size_t>(std::max(1, o.jobs)), result.files.size());
    std::vector<std::jthread> threads;
    for (size_t t = 1; t < n; ++t)
      threads.emplace_back([&] {
        HttpSession session(o.timeouts);
        worker(session);
      });
    worker(http);
  }
  result.fetched = tally.fetched();
  if (result.failures.empty() && info.commit != o.name.revision) repo.write_ref(o.name.revision, info.commit);
  return result;
}

}  // namespace peregrine::hub
