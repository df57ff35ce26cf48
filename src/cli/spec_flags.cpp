#include "cli/spec_flags.h"

#include "cli/embedded_model.h"
#include "cli/model_loading.h"
#include "format/gguf.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

// The file a proposer reads: the one its flag names, or the demo's embedded file of the
// proposer's name for the embedded demo target.
ModelFile open_proposer_file(const ProposerEntry& p, const std::optional<std::string>& path,
                             const std::optional<std::string>& target_path) {
  if (path) return open_model_arg(path, std::nullopt);
  if (!target_path) {
    if (auto bytes = embedded_demo_file(p.name)) {
      return read_gguf_bytes(*bytes, "<embedded demo " + std::string(p.name) + ">");
    }
  }
  throw UsageError("speculation: pass " + std::string(p.needs.file_flag) +
                   " FILE (only the embedded demo model has one built in)");
}

}  // namespace

void SpecFlags::add_to(ArgParser& p) {
  p.option("--spec", &spec, "NAME", "speculative decoding: " + proposer_names() + " (default: off)");
  for (const ProposerEntry& e : proposer_registry()) {
    if (!e.needs.file_flag.empty()) {
      p.option(std::string(e.needs.file_flag), &files[std::string(e.name)], "FILE", std::string(e.needs.file_help));
    }
  }
  p.option("--spec-tokens", &tokens, "K", "tokens proposed per sequence and step", 1, kMaxSpecTokens);
  p.option("--spec-max-batch", &max_batch, "N", "no speculation in steps with more than N sequences decoding", 0,
           1 << 20);
  p.flag("--spec-fixed", &fixed,
         "always propose --spec-tokens tokens (default: choose 0..K each step from measured acceptance and step "
         "costs, so speculation runs only where it is expected to pay)");
}

std::string SpecFlags::proposer_name() const {
  auto given = [&](std::string_view name) {
    const auto it = files.find(name);
    return it != files.end() && it->second.has_value();
  };
  std::string name = spec;
  for (const ProposerEntry& e : proposer_registry()) {
    if (name.empty() && e.needs.file_selects && given(e.name)) name = e.name;
  }
  if (!name.empty() && find_proposer(name) == nullptr) {
    throw UsageError("--spec '" + name + "': expected " + proposer_names());
  }
  for (const ProposerEntry& e : proposer_registry()) {
    if (given(e.name) && name != e.name) {
      throw UsageError(std::string(e.needs.file_flag) + " goes with --spec " + std::string(e.name) +
                       (name.empty() ? "" : ", not --spec " + name));
    }
  }
  return name;
}

const ProposerEntry* SpecFlags::proposer() const { return find_proposer(proposer_name()); }

std::shared_ptr<Proposer> SpecFlags::make_proposer(const Model& target, const std::optional<std::string>& target_path,
                                                   int64_t kv_tokens) const {
  const ProposerEntry* p = proposer();
  if (p == nullptr) return nullptr;
  return make_named_proposer(*p, target, target_path, kv_tokens);
}

std::shared_ptr<Proposer> SpecFlags::make_named_proposer(const ProposerEntry& p, const Model& target,
                                                         const std::optional<std::string>& target_path,
                                                         int64_t kv_tokens) const {
  ProposerInputs inputs{target, std::nullopt, kv_tokens};
  if (!p.needs.file_flag.empty()) {
    const auto it = files.find(p.name);
    inputs.file = open_proposer_file(p, it != files.end() ? it->second : std::nullopt, target_path);
  }
  return p.make(std::move(inputs));
}

bool SpecFlags::has_file_for(const ProposerEntry& p, const std::optional<std::string>& target_path) const {
  if (p.needs.file_flag.empty()) return true;
  const auto it = files.find(p.name);
  if (it != files.end() && it->second) return true;
  return !target_path && embedded_demo_file(p.name).has_value();
}

void SpecFlags::apply(EngineConfig& config, std::shared_ptr<Proposer> proposer) const {
  config.proposer = std::move(proposer);
  config.spec_tokens = tokens;
  config.spec_max_batch = max_batch;
  config.spec_adaptive = !fixed;
}

}  // namespace peregrine::cli
