#pragma once
// One file of a repository into the cache's blobs/: written to blobs/ETAG.incomplete, resumed
// from what is there with a Range request, hashed as it arrives, and renamed to blobs/ETAG only
// when its size and digest are what the hub's file list says. A file that fails its check is
// removed; one cut short is kept for the next attempt (or the next pull) to resume.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "hub/hf_cache.h"
#include "hub/http_client.h"
#include "hub/hub_api.h"

namespace peregrine::hub {

// Bytes on their way to the cache: what the progress bar shows. Safe to use from many threads.
class TransferTally {
 public:
  // `report(done, total)` runs under the tally's lock after every change.
  explicit TransferTally(std::function<void(uint64_t, uint64_t)> report) : report_(std::move(report)) {}
  void add_total(uint64_t bytes);
  void add_done(int64_t bytes);  // negative when a download starts again from zero
  uint64_t fetched() const { return fetched_.load(); }
  void add_fetched(uint64_t bytes) { fetched_ += bytes; }

 private:
  std::function<void(uint64_t, uint64_t)> report_;
  std::mutex mutex_;
  uint64_t done_ = 0, total_ = 0;
  std::atomic<uint64_t> fetched_{0};
};

struct BlobSource {
  const HubEndpoint* hub = nullptr;
  std::string repo, commit;
  int attempts = 3;          // transfers of one file before giving up (each resumes the last)
  int retry_delay_ms = 250;  // before the second attempt; doubled each time
};

// Makes repo.blob(file.etag()) hold the file, downloading what is missing. Throws HubError
// "PATH: what went wrong" when it cannot.
void download_blob(HttpSession& http, const BlobSource& source, const CacheRepo& repo, const RemoteFile& file,
                   TransferTally& tally);

}  // namespace peregrine::hub
