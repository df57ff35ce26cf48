// `peregrine pull` against a hub on 127.0.0.1 (local_hub.h): the cache it writes is the layout
// huggingface_hub writes, and runs by name; cut connections, killed processes and whole answers to
// Range requests resume or restart and still verify; gated files, bad hashes, missing repositories
// and write failures end in one error naming the file and the status, with nothing half-written
// where a name could reach it.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>

#include "hub/hub_fixtures.h"
#include "hub/local_hub.h"

extern char** environ;

namespace peregrine::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDemoCommit = "d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0";
constexpr const char* kTinyCommit = "7171717171717171717171717171717171717171";
constexpr const char* kGatedCommit = "9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a";

bool is_lfs(const std::string& path) { return path.ends_with(".safetensors") || path.ends_with(".gguf"); }

class HubPull : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& fx = hub_fixtures();
    root_ = scratch_dir("hub-pull-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    env_.set("HF_ENDPOINT", hub_.endpoint());
    env_.set("HF_HUB_CACHE", cache().string());
    env_.set("HF_HOME", (root_ / "home").string());  // no token file from the machine's own login
    env_.set("HF_TOKEN", std::nullopt);
    env_.set("HF_TOKEN_PATH", std::nullopt);
    std::vector<std::pair<std::string, fs::path>> folder;
    for (const auto& f : fs::directory_iterator(fx.folder)) folder.emplace_back(f.path().filename().string(), f.path());
    hub_.add_repo("org/demo", kDemoCommit, folder, is_lfs);
    const auto readme = root_ / "README.md";
    std::ofstream(readme) << "# tiny\nTwo quantizations of a random tiny-llama.\n";
    hub_.add_repo("org/tiny-GGUF", kTinyCommit,
                  {{"README.md", readme}, {"tiny-Q8_0.gguf", fx.q8}, {"tiny-Q4_0.gguf", fx.q4}}, is_lfs);
    hub_.add_repo("org/gated", kGatedCommit, {{"tiny-Q8_0.gguf", fx.q8}}, is_lfs, /*gated=*/true);
  }

  fs::path cache() const { return root_ / "hf"; }
  fs::path repo_dir(const std::string& folder) const { return cache() / folder; }
  fs::path tiny_blob() const { return repo_dir("models--org--tiny-GGUF") / "blobs" / sha256_of(hub_fixtures().q8); }
  fs::path tiny_part() const { return fs::path(tiny_blob().string() + ".incomplete"); }
  fs::path tiny_link() const {
    return repo_dir("models--org--tiny-GGUF") / "snapshots" / kTinyCommit / "tiny-Q8_0.gguf";
  }

  // The CDN requests (the LFS redirects' targets) the hub saw.
  std::vector<SeenRequest> cdn_requests() const {
    std::vector<SeenRequest> out;
    for (const auto& r : hub_.seen())
      if (r.path.starts_with("/cdn/")) out.push_back(r);
    return out;
  }

  LocalHub hub_;
  fs::path root_;
  ScopedEnv env_;
};

void expect_one_error(const Result& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << "'" << p << "' in: " << r.err;
  EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "one error: " << r.err;
}

// No name reaches the file: no link in the snapshot, no ref, and only a .incomplete (or nothing)
// where the blob would be.
void expect_not_placed(const fs::path& repo, const fs::path& link, const fs::path& blob) {
  EXPECT_FALSE(fs::exists(fs::symlink_status(link))) << link;
  EXPECT_FALSE(fs::exists(repo / "refs" / "main"));
  EXPECT_FALSE(fs::exists(blob)) << blob;
}

TEST_F(HubPull, WritesHubCacheLayoutAndRunsByName) {
  const Result r = peregrine({"pull", "org/demo"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "org/demo\n");
  const fs::path repo = repo_dir("models--org--demo");
  EXPECT_EQ(slurp(repo / "refs" / "main"), kDemoCommit);  // no newline, as huggingface_hub writes it
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(hub_fixtures().folder)) {
    ++files;
    const std::string name = f.path().filename().string();
    const std::string etag = is_lfs(name) ? sha256_of(f.path()) : git_blob_id_of(f.path());
    const fs::path link = repo / "snapshots" / kDemoCommit / name;
    ASSERT_TRUE(fs::is_symlink(link)) << link;
    EXPECT_EQ(fs::read_symlink(link).string(), "../../blobs/" + etag);
    EXPECT_EQ(sha256_of(repo / "blobs" / etag), sha256_of(f.path())) << name;
    EXPECT_TRUE(fs::exists(cache() / ".locks" / "models--org--demo" / (etag + ".lock")));
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(repo / "blobs"), {}), static_cast<long>(files)) << "no leftovers";
  // One model-info call fixed the commit: every file was asked for at it, never at "main".
  for (const auto& s : hub_.seen()) {
    if (s.path.find("/resolve/") != std::string::npos) {
      EXPECT_NE(s.path.find(kDemoCommit), std::string::npos) << s.path;
    }
  }

  EXPECT_EQ(greedy_tokens("org/demo"), greedy_tokens(hub_fixtures().folder.string()));

  hub_.forget_seen();
  const Result again = peregrine({"pull", "org/demo"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("(0 B downloaded now)"), std::string::npos) << again.err;
  EXPECT_EQ(hub_.seen().size(), 1u) << "only the file list";
}

TEST_F(HubPull, QuantOrIncludeChoosesFiles) {
  expect_one_error(peregrine({"pull", "org/tiny-GGUF"}), 2,
                   {"holds 2 GGUF files", "org/tiny-GGUF:QUANT", "tiny-Q4_0.gguf", "tiny-Q8_0.gguf"});
  const Result q4 = peregrine({"pull", "org/tiny-GGUF:Q4_0"});
  ASSERT_EQ(q4.exit_code, 0) << q4.err;
  const fs::path snap = repo_dir("models--org--tiny-GGUF") / "snapshots" / kTinyCommit;
  EXPECT_EQ(std::distance(fs::directory_iterator(snap), {}), 1);
  EXPECT_EQ(greedy_tokens("org/tiny-GGUF"), greedy_tokens(hub_fixtures().q4.string()));
  const Result more = peregrine({"pull", "org/tiny-GGUF", "--include", "*Q8*,README.*"});
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(snap), {}), 3);
  EXPECT_EQ(greedy_tokens("org/tiny-GGUF:q8_0"), greedy_tokens(hub_fixtures().q8.string()));
  expect_one_error(peregrine({"pull", "org/tiny-GGUF", "--include", "*.bin"}), 2, {"no file of org/tiny-GGUF matches"});
}

TEST_F(HubPull, GatedFilesNeedAToken) {
  const fs::path repo = repo_dir("models--org--gated");
  const fs::path link = repo / "snapshots" / kGatedCommit / "tiny-Q8_0.gguf";
  const fs::path blob = repo / "blobs" / sha256_of(hub_fixtures().q8);
  expect_one_error(peregrine({"pull", "org/gated"}), 1,
                   {"tiny-Q8_0.gguf", "401 Unauthorized", "GatedRepo", "HF_TOKEN"});
  expect_not_placed(repo, link, blob);
  env_.set("HF_TOKEN", "hf_wrong");
  expect_one_error(peregrine({"pull", "org/gated"}), 1, {"tiny-Q8_0.gguf", "403 Forbidden", "GatedRepo", "no access"});
  expect_not_placed(repo, link, blob);

  env_.set("HF_TOKEN", std::nullopt);
  const auto token_file = root_ / "token";
  std::ofstream(token_file) << hub_.token << "\n";
  hub_.forget_seen();
  const Result ok = peregrine({"pull", "org/gated", "--token-file", token_file.string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(sha256_of(link), sha256_of(hub_fixtures().q8));
  // The token went to the hub, never to the host the file was redirected to.
  size_t to_hub = 0, to_cdn = 0;
  for (const auto& s : hub_.seen()) {
    if (s.path.starts_with("/cdn/")) {
      ++to_cdn;
      EXPECT_TRUE(s.host.starts_with("localhost:")) << s.host;
      EXPECT_EQ(s.authorization, "") << "the token leaked to " << s.host;
    } else {
      ++to_hub;
      EXPECT_EQ(s.authorization, "Bearer " + hub_.token) << s.path;
    }
  }
  EXPECT_EQ(to_hub, 2u);
  EXPECT_EQ(to_cdn, 1u);
}

TEST_F(HubPull, MissingFileIs404AndTheOthersStay) {
  hub_.hide("org/tiny-GGUF", "README.md");
  expect_one_error(peregrine({"pull", "org/tiny-GGUF", "--include", "*Q8_0*,README.md"}), 1,
                   {"README.md: 404 Not Found (EntryNotFound"});
  // The file that came is in place (a later pull does not fetch it again); the ref waits for all.
  EXPECT_EQ(sha256_of(tiny_link()), sha256_of(hub_fixtures().q8));
  EXPECT_FALSE(fs::exists(repo_dir("models--org--tiny-GGUF") / "refs" / "main"));
}

TEST_F(HubPull, BadHashLeavesNothing) {
  hub_.corrupt("org/tiny-GGUF", "tiny-Q8_0.gguf");
  expect_one_error(peregrine({"pull", "org/tiny-GGUF:Q8_0"}), 1,
                   {"tiny-Q8_0.gguf: sha256 ", "does not match the " + sha256_of(hub_fixtures().q8), "removed"});
  expect_not_placed(repo_dir("models--org--tiny-GGUF"), tiny_link(), tiny_blob());
  EXPECT_FALSE(fs::exists(tiny_part()));
  expect_one_error(peregrine({"run", "org/tiny-GGUF:Q8_0"}), 2, {"no revision 'main'"});
}

TEST_F(HubPull, CutConnectionsResumeWithRange) {
  hub_.cut_at(1 << 20, 2);
  const Result r = peregrine({"pull", "org/tiny-GGUF:Q8_0", "-j", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(sha256_of(tiny_link()), sha256_of(hub_fixtures().q8));
  const auto cdn = cdn_requests();
  ASSERT_EQ(cdn.size(), 3u);
  EXPECT_EQ(cdn[0].range, "");
  EXPECT_EQ(cdn[1].range, "bytes=1048576-");
  EXPECT_EQ(cdn[2].range, "bytes=1048576-");
}

TEST_F(HubPull, InterruptedPullResumesNextTime) {
  const uint64_t size = fs::file_size(hub_fixtures().q8);
  hub_.cut_at(1 << 20, 100);
  expect_one_error(
      peregrine({"pull", "org/tiny-GGUF:Q8_0"}), 1,
      {"tiny-Q8_0.gguf", "1048576 of " + std::to_string(size) + " bytes", "tried 3 times", "pull again to resume"});
  expect_not_placed(repo_dir("models--org--tiny-GGUF"), tiny_link(), tiny_blob());
  EXPECT_EQ(fs::file_size(tiny_part()), 1u << 20);
  expect_one_error(peregrine({"run", "org/tiny-GGUF:Q8_0"}), 2, {"no revision 'main'"});

  hub_.cut_at(0, 0);
  hub_.forget_seen();
  const Result r = peregrine({"pull", "org/tiny-GGUF:Q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(cdn_requests().size(), 1u);
  EXPECT_EQ(cdn_requests()[0].range, "bytes=1048576-");
  EXPECT_EQ(sha256_of(tiny_link()), sha256_of(hub_fixtures().q8));
  EXPECT_FALSE(fs::exists(tiny_part()));
}

TEST_F(HubPull, KilledPullResumes) {
  hub_.throttle(100);  // 64 KiB per 0.1 s: the kill lands mid-file
  const std::string bin = (binary_dir() / "peregrine").string();
  const char* argv[] = {bin.c_str(), "pull", "org/tiny-GGUF:Q8_0", nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &actions, nullptr, const_cast<char**>(argv), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  const auto partial_bytes = [&] {
    std::error_code ec;
    const uintmax_t n = fs::file_size(tiny_part(), ec);
    return ec ? 0 : n;
  };
  for (int i = 0; i < 1000 && partial_bytes() < (256u << 10); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the pull finished before it was killed";
  const uint64_t kept = fs::file_size(tiny_part());
  EXPECT_GE(kept, 256u << 10);
  expect_not_placed(repo_dir("models--org--tiny-GGUF"), tiny_link(), tiny_blob());

  hub_.throttle(0);
  hub_.forget_seen();
  const Result r = peregrine({"pull", "org/tiny-GGUF:Q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(cdn_requests().size(), 1u);
  EXPECT_EQ(cdn_requests()[0].range, "bytes=" + std::to_string(kept) + "-");
  EXPECT_EQ(sha256_of(tiny_link()), sha256_of(hub_fixtures().q8));
}

TEST_F(HubPull, WholeAnswerToRangeStartsAgain) {
  hub_.cut_at(1 << 20, 100);
  ASSERT_EQ(peregrine({"pull", "org/tiny-GGUF:Q8_0"}).exit_code, 1);
  hub_.cut_at(0, 0);
  hub_.ignore_range(true);
  hub_.forget_seen();
  const Result r = peregrine({"pull", "org/tiny-GGUF:Q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(cdn_requests().at(0).range, "bytes=1048576-");
  EXPECT_EQ(sha256_of(tiny_link()), sha256_of(hub_fixtures().q8));
}

TEST_F(HubPull, ForeignPartialFailsItsCheckAndGoes) {
  // A .incomplete whose bytes are not the file's (another tool's bug, a disk error): resuming from
  // it gives a file that fails the check, which is removed; the next pull starts from zero.
  fs::create_directories(tiny_part().parent_path());
  std::ofstream(tiny_part(), std::ios::binary) << std::string(100000, 'z');
  expect_one_error(peregrine({"pull", "org/tiny-GGUF:Q8_0"}), 1,
                   {"tiny-Q8_0.gguf: sha256", "does not match", "removed"});
  EXPECT_FALSE(fs::exists(tiny_part()));
  ASSERT_EQ(peregrine({"pull", "org/tiny-GGUF:Q8_0"}).exit_code, 0);
  EXPECT_EQ(sha256_of(tiny_link()), sha256_of(hub_fixtures().q8));
}

TEST_F(HubPull, WriteFailureNamesTheFile) {
  // A file size limit (SIGXFSZ ignored, so the write fails with EFBIG) stands in for a full disk.
  const std::string cmd = "trap '' XFSZ; ulimit -f 2048; exec " + quote((binary_dir() / "peregrine").string()) +
                          " pull org/tiny-GGUF:Q8_0 2>" + quote((root_ / "err.txt").string());
  const int status = std::system(("sh -c " + quote(cmd)).c_str());
  const std::string err = slurp(root_ / "err.txt");
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_NE(err.find("tiny-Q8_0.gguf: writing "), std::string::npos) << err;
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  expect_not_placed(repo_dir("models--org--tiny-GGUF"), tiny_link(), tiny_blob());
}

TEST_F(HubPull, RepositoryErrorsNameTheStatus) {
  expect_one_error(peregrine({"pull", "org/absent"}), 1,
                   {"org/absent@main", "401 Unauthorized", "RepoNotFound", "no such repository, or a private one"});
  expect_one_error(peregrine({"pull", "org/demo@v9"}), 1, {"org/demo@v9", "404 Not Found", "RevisionNotFound"});
  env_.set("HF_ENDPOINT", "http://127.0.0.1:1");
  expect_one_error(peregrine({"pull", "org/demo"}), 1,
                   {"org/demo@main: cannot get the file list from http://127.0.0.1:1"});
  expect_one_error(peregrine({"pull", "org/de..mo"}), 2, {"not a Hugging Face name"});
  EXPECT_FALSE(fs::exists(cache() / "models--org--absent" / "refs"));
}

}  // namespace
}  // namespace peregrine::test
