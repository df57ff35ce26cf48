// `peregrine list`: what the Hugging Face cache and Ollama's store hold (hub/catalog.h), each with
// the name that runs it.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "hub/catalog.h"
#include "hub/hf_cache.h"
#include "hub/model_choice.h"
#include "hub/ollama_store.h"

namespace peregrine::cli {
namespace {

void print_table(const std::string& title, const std::filesystem::path& dir,
                 const std::vector<hub::CatalogEntry>& entries) {
  std::printf("%s (%s):\n", title.c_str(), dir.string().c_str());
  if (entries.empty()) {
    std::printf("  (nothing)\n");
    return;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "REVISION", "FILES", "SIZE", "ARCH", "TYPE"}};
  for (const auto& e : entries)
    rows.push_back({e.name, e.revision, std::to_string(e.files), hub::human_bytes(e.bytes),
                    e.architecture.empty() ? "-" : e.architecture, e.type});
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c)
      line += " " + row[c] + (c + 1 < row.size() ? std::string(width[c] - row[c].size() + 1, ' ') : "");
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int list_command(const Args& args) {
  bool json = false;
  ArgParser p("list",
              "What the model stores on this machine hold: the Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub,\n"
              "else ~/.cache/huggingface/hub) and Ollama's store (OLLAMA_MODELS, else ~/.ollama/models). NAME is what\n"
              "to give as MODEL to run, serve, info, bench, ...");
  p.flag("--json", &json,
         "one JSON array of entries (name, source, revision, commit, files, bytes, architecture, type, path)");
  if (!p.parse(args)) return 0;
  const auto hf_dir = hub::hf_cache_dir(), ollama_dir = hub::ollama_store_dir();
  const auto hf = hub::list_hf_cache(hf_dir), ollama = hub::list_ollama_store(ollama_dir);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto* list : {&hf, &ollama})
      for (const auto& e : *list)
        out.push_back({{"name", e.name},
                       {"source", e.source},
                       {"revision", e.revision},
                       {"commit", e.commit},
                       {"files", e.files},
                       {"bytes", e.bytes},
                       {"architecture", e.architecture},
                       {"type", e.type},
                       {"path", e.path.string()}});
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  print_table("Hugging Face cache", hf_dir, hf);
  print_table("Ollama store", ollama_dir, ollama);
  return 0;
}

}  // namespace peregrine::cli
