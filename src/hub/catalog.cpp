#include "hub/catalog.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "format/json_file.h"
#include "format/mapped_file.h"
#include "hub/hf_cache.h"
#include "hub/model_choice.h"
#include "hub/ollama_store.h"

namespace peregrine::hub {
namespace fs = std::filesystem;
namespace {

// Architecture and weight types of a GGUF: its metadata and tensor table only (the file is
// mapped, never copied, so only the header's pages are read).
void describe_gguf(const fs::path& path, CatalogEntry& e) {
  try {
    const MappedFile file(path, FileLoad::Map);
    const ModelFile mf = read_gguf_bytes(file.bytes(), path.string());
    e.architecture = mf.meta.get_string_opt("general.architecture").value_or("");
    std::map<TensorType, uint64_t> bytes;
    uint64_t total = 0;
    for (const auto& t : mf.tensors) {
      bytes[t.type] += t.data.size();
      total += t.data.size();
    }
    std::vector<std::pair<uint64_t, TensorType>> by_size;
    for (auto [type, n] : bytes) by_size.emplace_back(n, type);
    std::sort(by_size.rbegin(), by_size.rend());
    e.type = "gguf";
    // The types that hold at least a tenth of the weights, largest first.
    for (size_t i = 0; i < by_size.size(); ++i)
      if (i == 0 || by_size[i].first * 10 >= total)
        e.type += std::string(i == 0 ? " " : ", ") + std::string(tensor_type_name(by_size[i].second));
  } catch (const std::exception& ex) {
    e.type = std::string("unreadable GGUF: ") + ex.what();
  }
}

void describe_folder(const fs::path& dir, CatalogEntry& e) {
  try {
    const nlohmann::json config = read_json_file(dir / "config.json", 1 << 20);
    if (config.contains("model_type") && config["model_type"].is_string()) e.architecture = config["model_type"];
    std::string dtype;
    for (const char* key : {"torch_dtype", "dtype"})
      if (config.contains(key) && config[key].is_string()) dtype = config[key];
    e.type = "safetensors" + (dtype.empty() ? "" : " " + dtype);
  } catch (const std::exception& ex) {
    e.type = std::string("unreadable config.json: ") + ex.what();
  }
}

// The entries one snapshot of `repo` gives: the folder, its one GGUF, or each of its GGUFs.
void add_snapshot(const CacheRepo& repo, const std::string& commit, const std::vector<std::string>& ref_names,
                  std::vector<CatalogEntry>& out) {
  const fs::path dir = repo.snapshot(commit);
  std::vector<RepoEntry> files;
  uint64_t all_bytes = 0;
  for (const auto& f : snapshot_files(dir)) {
    files.push_back({f.path, f.size});
    all_bytes += f.size;
  }
  CatalogEntry base;
  base.source = "hf";
  base.commit = commit;
  const bool on_main = std::find(ref_names.begin(), ref_names.end(), "main") != ref_names.end();
  for (const auto& r : ref_names) base.revision += (base.revision.empty() ? "" : " ") + r;
  if (base.revision.empty()) base.revision = commit.substr(0, 7);
  base.name = repo.repo() + (on_main ? "" : "@" + (ref_names.empty() ? commit : ref_names.front()));
  std::vector<RepoEntry> choices;
  try {
    const ModelChoice c = choose_model(files, "", repo.repo());
    if (c.folder) {
      CatalogEntry e = base;
      e.files = files.size();
      e.bytes = all_bytes;
      e.path = dir;
      describe_folder(dir, e);
      out.push_back(e);
      return;
    }
    choices.push_back({c.file, 0});
  } catch (const std::exception&) {  // several GGUF files: each is an entry
    choices = model_gguf_files(files);
    if (choices.empty()) {
      CatalogEntry e = base;
      e.files = files.size();
      e.bytes = all_bytes;
      e.path = dir;
      e.type = "no model files";
      out.push_back(e);
      return;
    }
  }
  for (const auto& c : choices) {
    CatalogEntry e = base;
    if (choices.size() > 1) e.name += ":" + c.path;
    e.files = 1;
    e.path = dir / c.path;
    std::error_code ec;
    e.bytes = fs::file_size(e.path, ec);
    describe_gguf(e.path, e);
    out.push_back(e);
  }
}

}  // namespace

std::vector<CatalogEntry> list_hf_cache(const fs::path& cache) {
  std::vector<CatalogEntry> out;
  std::vector<fs::path> repos;
  std::error_code ec;
  for (fs::directory_iterator it(cache, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && CacheRepo::repo_of_folder(it->path().filename().string())) repos.push_back(it->path());
  std::sort(repos.begin(), repos.end());
  for (const auto& folder : repos) {
    const CacheRepo repo(cache, *CacheRepo::repo_of_folder(folder.filename().string()));
    std::map<std::string, std::vector<std::string>> refs_of;  // commit -> refs naming it
    for (const auto& [ref, commit] : repo.refs()) refs_of[commit].push_back(ref);
    std::vector<std::string> commits;
    for (fs::directory_iterator it(repo.root() / "snapshots", ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec) && is_commit_hash(it->path().filename().string()))
        commits.push_back(it->path().filename().string());
    std::sort(commits.begin(), commits.end(), [&](const std::string& a, const std::string& b) {
      return refs_of.count(a) != refs_of.count(b) ? refs_of.count(a) > refs_of.count(b) : a < b;  // named first
    });
    for (const auto& commit : commits) add_snapshot(repo, commit, refs_of[commit], out);
  }
  return out;
}

std::vector<CatalogEntry> list_ollama_store(const fs::path& store) {
  std::vector<CatalogEntry> out;
  for (const OllamaName& name : ollama_names(store)) {
    CatalogEntry e;
    e.source = "ollama";
    e.name = name.text();
    e.revision = name.tag;
    try {
      const OllamaModel m = find_ollama_model(store, name);
      e.commit = m.digest;
      e.files = 1;
      e.bytes = m.size;
      e.path = m.gguf;
      describe_gguf(m.gguf, e);
    } catch (const std::exception& ex) {
      e.type = ex.what();
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace peregrine::hub
