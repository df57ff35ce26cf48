#include "hub/blob_download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "hub/digest.h"

namespace peregrine::hub {
namespace fs = std::filesystem;
namespace {

// A failure another attempt may get past (a cut connection, a 5xx, a stall).
struct Retryable {
  std::string why;
  bool restart = false;  // what is on disk cannot be resumed from: remove it first
};

std::string errno_text(int err) { return std::strerror(err); }

// The .incomplete file of one download: the bytes so far (a prefix of the file, as far as anyone
// knows until the digest says) and their running digest.
class PartialFile {
 public:
  // Opens or creates `path`; a file longer than the download cannot be a prefix of it and is
  // emptied; what is there is hashed, to be resumed from.
  PartialFile(const fs::path& path, const RemoteFile& file)
      : path_(path), file_(file), digest_(hub_file_digest(file.lfs(), file.size)) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw HubError(file.path + ": cannot write " + path.string() + ": " + errno_text(errno));
    struct stat st {};
    ::fstat(fd_, &st);
    written_ = static_cast<uint64_t>(st.st_size);
    if (written_ > file.size && !restart()) throw HubError(file.path + ": " + why_);
    std::vector<char> buf(1 << 20);
    for (uint64_t at = 0; at < written_;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), written_ - at));
      const ssize_t n = ::pread(fd_, buf.data(), want, static_cast<off_t>(at));
      if (n <= 0) throw HubError(file.path + ": cannot read " + path.string() + ": " + errno_text(errno));
      digest_.update(std::span<const char>(buf.data(), static_cast<size_t>(n)));
      at += static_cast<uint64_t>(n);
    }
  }
  ~PartialFile() { ::close(fd_); }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;

  uint64_t size() const { return written_; }
  // Why the last restart() or append() failed.
  const std::string& why() const { return why_; }

  bool restart() {
    written_ = 0;
    digest_ = hub_file_digest(file_.lfs(), file_.size);
    if (::ftruncate(fd_, 0) == 0) return true;
    why_ = "cannot truncate " + path_.string() + ": " + errno_text(errno);
    return false;
  }

  // False when the bytes would make the file longer than the file list says, or the disk refuses.
  bool append(std::span<const char> bytes) {
    if (written_ + bytes.size() > file_.size) {
      why_ = "the server sent more than the " + std::to_string(file_.size) + " bytes the file list says";
      return false;
    }
    for (std::span<const char> rest = bytes; !rest.empty();) {
      const ssize_t n =
          ::pwrite(fd_, rest.data(), rest.size(), static_cast<off_t>(written_ + (bytes.size() - rest.size())));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        why_ = "writing " + path_.string() + ": " + errno_text(n < 0 ? errno : ENOSPC);
        return false;
      }
      rest = rest.subspan(static_cast<size_t>(n));
    }
    digest_.update(bytes);
    written_ += bytes.size();
    return true;
  }

  // The digest of the whole file, once it is on disk.
  std::string finish() {
    if (::fdatasync(fd_) != 0) throw HubError(file_.path + ": writing " + path_.string() + ": " + errno_text(errno));
    return digest_.hex();
  }

 private:
  int fd_ = -1;
  fs::path path_;
  const RemoteFile& file_;
  Digest digest_;
  uint64_t written_ = 0;
  std::string why_;
};

// The first byte a 206 answer's "Content-Range: bytes FIRST-LAST/TOTAL" carries; nullopt if unreadable.
std::optional<uint64_t> range_start(const HttpHop& hop) {
  auto it = hop.headers.find("content-range");
  if (it == hop.headers.end() || !it->second.starts_with("bytes ")) return std::nullopt;
  uint64_t v = 0;
  const char* b = it->second.data() + 6;
  const auto [end, ec] = std::from_chars(b, it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end == b || *end != '-') return std::nullopt;
  return v;
}

// The hub's ETag as a bare hash: without W/ and quotes.
std::string bare_etag(std::string etag) {
  if (etag.starts_with("W/")) etag.erase(0, 2);
  std::erase(etag, '"');
  return etag;
}

// What a finished transfer's answer means: nothing when the file is whole, else Retryable or
// HubError.
void check_answer(const HttpResponse& r, const RemoteFile& file, uint64_t written, bool have_token) {
  const long status = r.status();
  if (status == 416 || status == 429 || status >= 500) throw Retryable{describe_failure(r, have_token), status == 416};
  if (status < 200 || status >= 300) throw HubError(file.path + ": " + describe_failure(r, have_token));
  if (written < file.size)
    throw Retryable{"the connection ended after " + std::to_string(written) + " of " + std::to_string(file.size) +
                    " bytes"};
  const std::string linked = bare_etag(r.any_header("x-linked-etag"));
  if (file.lfs() && !linked.empty() && linked != file.sha256)
    throw HubError(file.path + ": the hub's file list says sha256 " + file.sha256 + " but the file's header says " +
                   linked);
}

// Fetches the rest of `part` (from its size on, with a Range request when it is not empty).
void fetch_rest(HttpSession& http, const BlobSource& src, const RemoteFile& file, PartialFile& part,
                TransferTally& tally) {
  const uint64_t have = part.size();
  std::vector<std::string> headers = src.hub->auth_headers();
  if (have > 0) headers.push_back("Range: bytes=" + std::to_string(have) + "-");
  bool resumed_elsewhere = false;
  const auto start = [&](const HttpHop& hop) {
    if (hop.status == 206) {
      resumed_elsewhere = range_start(hop) != have;
      return !resumed_elsewhere;
    }
    tally.add_done(-static_cast<int64_t>(part.size()));  // a whole answer to a Range request: start again
    return part.size() == 0 || part.restart();
  };
  const auto sink = [&](std::span<const char> bytes) {
    if (!part.append(bytes)) return false;
    tally.add_done(static_cast<int64_t>(bytes.size()));
    tally.add_fetched(bytes.size());
    return true;
  };
  HttpResponse r;
  try {
    r = http.download(resolve_url(*src.hub, src.repo, src.commit, file.path), headers, start, sink);
  } catch (const TransferError& e) {
    throw Retryable{std::string(e.what()) + " after " + std::to_string(part.size()) + " of " +
                    std::to_string(file.size) + " bytes"};
  }
  if (resumed_elsewhere) throw Retryable{"the server resumed at another byte than " + std::to_string(have), true};
  if (http.aborted()) throw HubError(file.path + ": " + part.why());
  check_answer(r, file, part.size(), src.hub->token.has_value());
}

// One transfer into `path` (the .incomplete file), resuming from what it holds. Returns the
// digest of the whole file. Throws Retryable or HubError.
std::string transfer(HttpSession& http, const BlobSource& src, const RemoteFile& file, const fs::path& path,
                     TransferTally& tally) {
  PartialFile part(path, file);
  tally.add_done(static_cast<int64_t>(part.size()));
  if (part.size() < file.size) fetch_rest(http, src, file, part, tally);
  return part.finish();
}

}  // namespace

void TransferTally::add_total(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  total_ += bytes;
  if (report_) report_(done_, total_);
}

void TransferTally::add_done(int64_t bytes) {
  std::lock_guard lock(mutex_);
  done_ = static_cast<uint64_t>(static_cast<int64_t>(done_) + bytes);
  if (report_) report_(done_, total_);
}

void download_blob(HttpSession& http, const BlobSource& source, const CacheRepo& repo, const RemoteFile& file,
                   TransferTally& tally) {
  const fs::path part = repo.incomplete(file.etag());
  std::string digest, last_failure;
  int delay_ms = source.retry_delay_ms;
  for (int attempt = 1; digest.empty(); ++attempt) {
    try {
      digest = transfer(http, source, file, part, tally);
    } catch (const Retryable& r) {
      last_failure = r.why;
      std::error_code ec;
      const uint64_t after = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
      tally.add_done(-static_cast<int64_t>(after));  // counted again when the next attempt resumes
      if (r.restart) fs::remove(part, ec);
      if (attempt >= source.attempts)
        throw HubError(file.path + ": " + last_failure + " (tried " + std::to_string(attempt) +
                       " times; the partial download is kept: pull again to resume)");
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      delay_ms *= 2;
    }
  }
  if (digest != file.etag()) {
    std::error_code ec;
    fs::remove(part, ec);
    tally.add_done(-static_cast<int64_t>(file.size));
    throw HubError(file.path + ": " + (file.lfs() ? "sha256 " : "git blob id ") + digest + " does not match the " +
                   file.etag() + " the hub lists; the download was removed");
  }
  fs::rename(part, repo.blob(file.etag()));
}

}  // namespace peregrine::hub
