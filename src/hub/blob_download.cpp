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

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

// Feeds the first `bytes` of the file at `fd` to `digest`.
void hash_prefix(int fd, uint64_t bytes, Digest& digest, const std::string& where) {
  std::vector<char> buf(1 << 20);
  for (uint64_t at = 0; at < bytes;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
    const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
    if (n <= 0) throw HubError(where + ": cannot read the partial download: " + errno_text(errno));
    digest.update(std::span<const char>(buf.data(), static_cast<size_t>(n)));
    at += static_cast<uint64_t>(n);
  }
}

// Writes all of `bytes` at `offset`; false with `err` set when the disk refuses.
bool write_all(int fd, std::span<const char> bytes, uint64_t offset, int& err) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      return false;
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

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

// One transfer into `path` (the .incomplete file), resuming from its length. Returns the digest
// of the whole file once it holds `file.size` bytes. Throws Retryable or HubError.
std::string transfer(HttpSession& http, const BlobSource& src, const RemoteFile& file, const fs::path& path,
                     TransferTally& tally) {
  const std::string& where = file.path;
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw HubError(where + ": cannot write " + path.string() + ": " + errno_text(errno));
  struct stat st {};
  ::fstat(fd.get(), &st);
  uint64_t have = static_cast<uint64_t>(st.st_size);
  if (have > file.size) {  // longer than the file: not a prefix of it
    if (::ftruncate(fd.get(), 0) != 0) throw HubError(where + ": cannot truncate " + path.string());
    have = 0;
  }
  Digest digest = hub_file_digest(file.lfs(), file.size);
  hash_prefix(fd.get(), have, digest, where);
  tally.add_done(static_cast<int64_t>(have));
  uint64_t written = have;
  if (written < file.size) {
    std::vector<std::string> headers = src.hub->auth_headers();
    if (have > 0) headers.push_back("Range: bytes=" + std::to_string(have) + "-");
    std::string abort_reason;
    bool abort_restart = false;
    const auto start = [&](const HttpHop& hop) {
      if (hop.status == 206) {
        if (range_start(hop) == have) return true;
        abort_reason = "the server resumed at another byte than " + std::to_string(have);
        abort_restart = true;
        return false;
      }
      if (written > 0) {  // a whole answer to a Range request: start again from zero
        tally.add_done(-static_cast<int64_t>(written));
        written = 0;
        digest = hub_file_digest(file.lfs(), file.size);
        if (::ftruncate(fd.get(), 0) != 0) {
          abort_reason = "cannot truncate " + path.string() + ": " + errno_text(errno);
          return false;
        }
      }
      return true;
    };
    const auto sink = [&](std::span<const char> bytes) {
      if (written + bytes.size() > file.size) {
        abort_reason = "the server sent more than the " + std::to_string(file.size) + " bytes the file list says";
        return false;
      }
      int err = 0;
      if (!write_all(fd.get(), bytes, written, err)) {
        abort_reason = "writing " + path.string() + ": " + errno_text(err);
        return false;
      }
      digest.update(bytes);
      written += bytes.size();
      tally.add_done(static_cast<int64_t>(bytes.size()));
      tally.add_fetched(bytes.size());
      return true;
    };
    HttpResponse r;
    try {
      r = http.download(resolve_url(*src.hub, src.repo, src.commit, file.path), headers, start, sink);
    } catch (const TransferError& e) {
      throw Retryable{std::string(e.what()) + " after " + std::to_string(written) + " of " + std::to_string(file.size) +
                      " bytes"};
    }
    if (http.aborted()) {
      if (abort_restart) throw Retryable{abort_reason, true};
      throw HubError(where + ": " + abort_reason);
    }
    const long status = r.status();
    if (status == 416 || status == 429 || status >= 500)
      throw Retryable{describe_failure(r, src.hub->token.has_value()), status == 416};
    if (status < 200 || status >= 300) throw HubError(where + ": " + describe_failure(r, src.hub->token.has_value()));
    if (written < file.size)
      throw Retryable{"the connection ended after " + std::to_string(written) + " of " + std::to_string(file.size) +
                      " bytes"};
    const std::string linked = bare_etag(r.any_header("x-linked-etag"));
    if (file.lfs() && !linked.empty() && linked != file.sha256)
      throw HubError(where + ": the hub's file list says sha256 " + file.sha256 + " but the file's header says " +
                     linked);
  }
  if (::fdatasync(fd.get()) != 0) throw HubError(where + ": writing " + path.string() + ": " + errno_text(errno));
  return digest.hex();
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
