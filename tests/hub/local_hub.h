#pragma once
// A Hugging Face hub on 127.0.0.1 for the pull tests: the model API (the commit and the files with
// their sizes, blob ids and LFS sha256), `resolve` (small files directly with their git blob id as
// ETag; LFS files as a 302 to a "CDN" path on another host name, localhost, carrying X-Linked-Etag,
// X-Linked-Size and X-Repo-Commit), Range requests (cpp-httplib answers them with 206), the hub's
// error codes (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo), and faults a real
// download meets: a connection cut mid-file, a slow transfer, a server that ignores Range, a file
// whose bytes do not match the hash the API lists. Hashes are computed by sha256sum and
// `git hash-object`, not by the code under test. Every request is logged for the tests to check.
#include <httplib.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/test_paths.h"

namespace peregrine::test {

// The first word of `cmd`'s output.
inline std::string command_word(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) throw std::runtime_error("cannot run " + cmd);
  char buf[256] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, p.get());
  std::string out(buf, n);
  return out.substr(0, out.find_first_of(" \n"));
}

inline std::string sha256_of(const std::filesystem::path& f) { return command_word("sha256sum '" + f.string() + "'"); }
inline std::string git_blob_id_of(const std::filesystem::path& f) {
  return command_word("git hash-object --no-filters '" + f.string() + "'");
}

struct HubFile {
  std::string path;
  std::shared_ptr<const std::string> bytes;   // what the API describes
  std::shared_ptr<const std::string> served;  // what the server sends (other bytes: a bad hash)
  bool lfs = false;
  std::string sha256, blob_id;
};

struct HubRepo {
  std::string commit;
  std::map<std::string, std::string> refs;  // revision -> commit
  std::vector<HubFile> files;
  bool gated = false;
};

struct SeenRequest {
  std::string host, path, range, authorization;
};

class LocalHub {
 public:
  LocalHub() {
    server_.Get(R"(/api/models/([^/]+/[^/]+)/revision/(.+))", [this](const auto& req, auto& res) { info(req, res); });
    server_.Get(R"(/([^/]+/[^/]+)/resolve/([0-9a-f]{40})/(.+))",
                [this](const auto& req, auto& res) { resolve(req, res); });
    server_.Get(R"(/cdn/([^/]+/[^/]+)/([0-9a-f]{64}))", [this](const auto& req, auto& res) { cdn(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~LocalHub() {
    server_.stop();
    thread_.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string token = "hf_test_token";

  // A repository at `commit` (main points to it) with files from disk; `lfs` picks which are LFS.
  void add_repo(const std::string& name, const std::string& commit,
                const std::vector<std::pair<std::string, std::filesystem::path>>& files,
                const std::function<bool(const std::string&)>& lfs, bool gated = false) {
    HubRepo r;
    r.commit = commit;
    r.refs["main"] = commit;
    r.gated = gated;
    for (const auto& [path, disk] : files) {
      HubFile f;
      f.path = path;
      f.bytes = std::make_shared<const std::string>(slurp(disk));
      f.served = f.bytes;
      f.lfs = lfs(path);
      f.sha256 = sha256_of(disk);
      f.blob_id = git_blob_id_of(disk);
      if (f.lfs) {  // an LFS file's blob id is the pointer file's
        const auto pointer = scratch_dir("local-hub-pointer") / "pointer";
        std::ofstream(pointer) << "version https://git-lfs.github.com/spec/v1\noid sha256:" << f.sha256 << "\nsize "
                               << f.bytes->size() << "\n";
        f.blob_id = git_blob_id_of(pointer);
      }
      r.files.push_back(std::move(f));
    }
    std::lock_guard lock(mutex_);
    repos_[name] = std::move(r);
  }
  // Changes one byte of what is served for `path` (the API keeps the true hash).
  void corrupt(const std::string& repo, const std::string& path) {
    std::lock_guard lock(mutex_);
    for (auto& f : repos_.at(repo).files)
      if (f.path == path) {
        auto bad = std::make_shared<std::string>(*f.bytes);
        (*bad)[bad->size() / 2] ^= 0x5a;
        f.served = bad;
      }
  }
  // `path` stays in the file list but `resolve` answers 404 EntryNotFound for it.
  void hide(const std::string& repo, const std::string& path) {
    std::lock_guard lock(mutex_);
    hidden_.insert(repo + "/" + path);
  }
  // The next `times` transfers of any file stop after its byte `at` and close the connection.
  void cut_at(uint64_t at, int times) {
    std::lock_guard lock(mutex_);
    cut_at_ = at;
    cuts_left_ = times;
  }
  // Each 64 KiB chunk waits `ms` before it is sent.
  void throttle(int ms) { throttle_ms_ = ms; }
  // Range headers are ignored: whole files come back with 200.
  void ignore_range(bool on) { ignore_range_ = on; }

  std::vector<SeenRequest> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  void forget_seen() {
    std::lock_guard lock(mutex_);
    seen_.clear();
  }

 private:
  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void log(const httplib::Request& req) {
    std::lock_guard lock(mutex_);
    seen_.push_back(
        {req.get_header_value("Host"), req.path, req.get_header_value("Range"), req.get_header_value("Authorization")});
  }

  static void error(httplib::Response& res, int status, const std::string& code, const std::string& message) {
    res.status = status;
    res.set_header("X-Error-Code", code);
    res.set_header("X-Error-Message", message);
    res.set_content("{\"error\":\"" + message + "\"}", "application/json");
  }

  const HubRepo* find_repo(const std::string& name) const {
    auto it = repos_.find(name);
    return it == repos_.end() ? nullptr : &it->second;
  }

  void info(const httplib::Request& req, httplib::Response& res) {
    log(req);
    std::lock_guard lock(mutex_);
    const HubRepo* r = find_repo(req.matches[1]);
    if (r == nullptr) return error(res, 401, "RepoNotFound", "Repository not found");
    const std::string rev = req.matches[2];
    std::string commit = rev == r->commit ? rev : "";
    if (auto it = r->refs.find(rev); it != r->refs.end()) commit = it->second;
    if (commit.empty()) return error(res, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    nlohmann::json j = {{"id", std::string(req.matches[1])}, {"sha", commit}, {"siblings", nlohmann::json::array()}};
    j["gated"] = r->gated ? nlohmann::json("manual") : nlohmann::json(false);
    for (const auto& f : r->files) {
      nlohmann::json s = {{"rfilename", f.path}, {"size", f.bytes->size()}, {"blobId", f.blob_id}};
      if (f.lfs) s["lfs"] = {{"sha256", f.sha256}, {"size", f.bytes->size()}, {"pointerSize", 134}};
      j["siblings"].push_back(s);
    }
    res.set_content(j.dump(), "application/json");
  }

  void resolve(const httplib::Request& req, httplib::Response& res) {
    log(req);
    std::lock_guard lock(mutex_);
    const HubRepo* r = find_repo(req.matches[1]);
    if (r == nullptr) return error(res, 401, "RepoNotFound", "Repository not found");
    if (r->gated && req.get_header_value("Authorization") != "Bearer " + token) {
      const bool anonymous = !req.has_header("Authorization");
      return error(res, anonymous ? 401 : 403, "GatedRepo",
                   "Access to model " + std::string(req.matches[1]) + " is restricted");
    }
    for (const auto& f : r->files) {
      if (f.path != std::string(req.matches[3]) || hidden_.count(std::string(req.matches[1]) + "/" + f.path)) continue;
      res.set_header("X-Repo-Commit", r->commit);
      if (f.lfs) {
        res.set_header("X-Linked-Etag", "\"" + f.sha256 + "\"");
        res.set_header("X-Linked-Size", std::to_string(f.bytes->size()));
        res.set_header("ETag", "\"" + f.blob_id + "\"");
        res.set_redirect("http://localhost:" + std::to_string(port_) + "/cdn/" + std::string(req.matches[1]) + "/" +
                             f.sha256 + "?signature=abc",
                         302);
        // A body the client must not keep. Chunked, so that cpp-httplib does not apply the
        // request's Range to it (the hub answers a ranged resolve with the same 302).
        res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
          if (offset == 0)
            sink.write("Found. Redirecting", 18);
          else
            sink.done();
          return true;
        });
        return;
      }
      res.set_header("ETag", "\"" + f.blob_id + "\"");
      return send(f.served, res);
    }
    error(res, 404, "EntryNotFound", "Entry not found");
  }

  void cdn(const httplib::Request& req, httplib::Response& res) {
    log(req);
    std::lock_guard lock(mutex_);
    if (const HubRepo* r = find_repo(req.matches[1]))
      for (const auto& f : r->files)
        if (f.lfs && f.sha256 == std::string(req.matches[2])) return send(f.served, res);
    res.status = 404;
  }

  // The bytes, with cpp-httplib answering a Range with 206 (or, when ignoring ranges, a chunked
  // 200 it does not cut down), cut or slowed as set.
  void send(std::shared_ptr<const std::string> bytes, httplib::Response& res) {
    uint64_t cut = UINT64_MAX;
    if (cuts_left_ > 0) {
      --cuts_left_;
      cut = cut_at_;
    }
    const int throttle_ms = throttle_ms_;
    auto provide = [bytes, cut, throttle_ms](size_t offset, httplib::DataSink& sink) {
      if (offset >= bytes->size()) {
        sink.done();
        return true;
      }
      if (throttle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(throttle_ms));
      size_t n = std::min<size_t>(64 << 10, bytes->size() - offset);
      if (offset + n > cut) n = cut > offset ? cut - offset : 0;
      if (n > 0) sink.write(bytes->data() + offset, n);
      return offset + n < cut;  // false: the connection is closed mid-file
    };
    if (ignore_range_) {
      res.status = 200;
      res.set_chunked_content_provider("application/octet-stream", provide);
    } else {
      res.set_content_provider(
          bytes->size(), "application/octet-stream",
          [provide](size_t offset, size_t, httplib::DataSink& sink) { return provide(offset, sink); });
    }
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::map<std::string, HubRepo> repos_;
  std::vector<SeenRequest> seen_;
  std::set<std::string> hidden_;
  uint64_t cut_at_ = 0;
  int cuts_left_ = 0;
  std::atomic<int> throttle_ms_{0};
  std::atomic<bool> ignore_range_{false};
};

}  // namespace peregrine::test
