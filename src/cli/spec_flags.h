#pragma once
// Speculative decoding's flags, shared by `run`, `serve`, `bench` and `bench-serve`:
//   --spec NAME                which proposer (engine/proposer_registry.h: draft, ngram, heads;
//                              off by default; --draft-model alone means draft)
//   --draft-model FILE, --heads FILE, ...  the file a proposer reads, one flag per proposer that
//                              has one (its registry entry names the flag)
//   --spec-tokens K            proposals per sequence and step, 1..32 (default 4)
//   --spec-max-batch N         no speculation in steps with more than N sequences decoding
//   --spec-fixed               always K proposals (default: 0..K per step, engine/draft_policy.h)
// On the embedded demo model the draft and heads trained for it are embedded too, so
// `peregrine run --spec draft` needs no file.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "engine/engine_core.h"
#include "engine/proposer.h"
#include "engine/proposer_registry.h"
#include "model/model.h"

namespace peregrine::cli {

struct SpecFlags {
  std::string spec;
  // The files given for proposers (--draft-model, --heads), by proposer name.
  std::map<std::string, std::optional<std::string>, std::less<>> files;
  int64_t tokens = 4;
  int64_t max_batch = 8;
  bool fixed = false;

  void add_to(ArgParser& parser);
  bool enabled() const { return !proposer_name().empty(); }
  // The registered proposer's name or "" (off), after a file that selects its proposer
  // (--draft-model: draft). Throws UsageError for an unknown name or a file given for another
  // proposer.
  std::string proposer_name() const;
  // Its registry entry (null when off).
  const ProposerEntry* proposer() const;

  // The proposer for `target` (null when speculation is off); `target_path` is the target's
  // MODEL argument (nullopt = the embedded demo model). kv_tokens: the draft model's cache size.
  // Throws UsageError / FormatError naming the file for a draft of another vocabulary, a file
  // that is not a model or not heads for this target.
  std::shared_ptr<Proposer> make_proposer(const Model& target, const std::optional<std::string>& target_path,
                                          int64_t kv_tokens) const;
  // The same for any registered proposer (the web page's lab offers each one it can build).
  std::shared_ptr<Proposer> make_named_proposer(const ProposerEntry& p, const Model& target,
                                                const std::optional<std::string>& target_path, int64_t kv_tokens) const;
  // Whether its file can be found: none needed, given by its flag, or embedded for the demo target.
  bool has_file_for(const ProposerEntry& p, const std::optional<std::string>& target_path) const;
  // Sets the proposer and its limits in `config`.
  void apply(EngineConfig& config, std::shared_ptr<Proposer> proposer) const;
};

}  // namespace peregrine::cli
