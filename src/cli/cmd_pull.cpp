// `peregrine pull`: a model from the Hugging Face hub into the hub cache (hub/pull.h), where
// `peregrine run ORG/NAME` (and huggingface_hub) find it.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "hub/hf_cache.h"
#include "hub/model_choice.h"
#include "hub/pull.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

std::vector<std::string> split_commas(const std::optional<std::string>& text) {
  std::vector<std::string> out;
  if (!text) return out;
  size_t start = 0;
  for (size_t comma; (comma = text->find(',', start)) != std::string::npos; start = comma + 1)
    if (comma > start) out.push_back(text->substr(start, comma - start));
  if (start < text->size()) out.push_back(text->substr(start));
  if (out.empty()) throw UsageError("--include needs at least one glob");
  return out;
}

}  // namespace

int pull_command(const Args& args) {
  std::string name;
  std::optional<std::string> include, token_file;
  int64_t jobs = 4;
  ArgParser p("pull",
              "Download a model from the Hugging Face hub (HF_ENDPOINT, default https://huggingface.co) into the\n"
              "hub cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), laid out as huggingface_hub\n"
              "lays it out, so either tool uses what the other fetched. Each file is written to *.incomplete, resumed\n"
              "after an interruption (run the same command again), and checked against the hub's SHA-256 (git blob id\n"
              "for small files) before it is used. Then `peregrine run ORG/NAME` runs it.");
  p.positional("NAME", &name,
               "ORG/NAME[@REVISION][:FILE|:QUANT]: every file of the repository, or with :FILE or :QUANT (Q4_K_M)\n"
               "only that GGUF; a repository of several GGUF files needs one of them (or --include)");
  p.option("--include", &include, "GLOB[,GLOB...]", "only the files matching a glob ('*' also matches '/')");
  p.option("--token-file", &token_file, "FILE",
           "read the access token for gated or private models from FILE (default: HF_TOKEN, else HF_HOME/token)");
  p.option("-j,--jobs", &jobs, "N", "files downloaded at once", 1, 16);
  if (!p.parse(args)) return 0;

  hub::PullOptions o;
  o.name = hub::parse_hub_name(name);
  o.include = split_commas(include);
  o.jobs = static_cast<int>(jobs);
  o.cache = hub::hf_cache_dir();
  if (token_file)
    o.hub = hub::hub_endpoint_from_env(std::filesystem::path(*token_file));
  else
    o.hub = hub::hub_endpoint_from_env(std::nullopt);
  TransferLine line("pull " + o.name.repo);
  o.progress = std::ref(line);
  std::fprintf(stderr, "pulling %s@%s from %s into %s\n", o.name.repo.c_str(), o.name.revision.c_str(),
               o.hub.base.c_str(), o.cache.string().c_str());
  const hub::PullResult r = hub::pull(o);
  line.finish();
  if (!r.failures.empty()) {
    for (size_t i = 0; i + 1 < r.failures.size(); ++i)
      std::fprintf(stderr, "peregrine pull: error: %s\n", r.failures[i].c_str());
    const std::string more = r.failures.size() > 1 ? " (" + std::to_string(r.failures.size()) + " of " +
                                                         std::to_string(r.files.size()) + " files failed)"
                                                   : "";
    throw hub::HubError(r.failures.back() + more);
  }
  std::fprintf(stderr, "%s@%s is commit %s: %zu file%s, %s (%s downloaded now), in %s\n", o.name.repo.c_str(),
               o.name.revision.c_str(), r.commit.c_str(), r.files.size(), r.files.size() == 1 ? "" : "s",
               hub::human_bytes(r.bytes).c_str(), hub::human_bytes(r.fetched).c_str(), r.snapshot.string().c_str());
  std::printf("%s\n", o.name.text().c_str());  // the name to run it by
  return 0;
}

}  // namespace peregrine::cli
