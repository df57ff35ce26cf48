#include "cli/spec_flags.h"

#include "cli/embedded_model.h"
#include "cli/model_loading.h"
#include "engine/draft_proposer.h"
#include "engine/draft_heads_proposer.h"
#include "engine/ngram_proposer.h"
#include "format/gguf.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

// The file named by a flag, or the demo file embedded for the embedded demo target.
ModelFile open_companion(const std::optional<std::string>& path, const std::optional<std::string>& target_path,
                         DemoFile which, const char* flag) {
  if (path) return open_model_arg(path, std::nullopt);
  if (!target_path) {
    if (auto bytes = embedded_demo_file(which)) {
      return read_gguf_bytes(*bytes, which == DemoFile::Draft ? "<embedded demo draft>" : "<embedded demo heads>");
    }
  }
  throw UsageError(std::string("speculation: pass ") + flag + " FILE (only the embedded demo model has one built in)");
}

}  // namespace

void SpecFlags::add_to(ArgParser& p) {
  p.option("--spec", &spec, "NAME", "speculative decoding: draft, ngram or heads (default: off)");
  p.option("--draft-model", &draft_model, "FILE", "draft model for --spec draft (same vocabulary as the model)");
  p.option("--heads", &heads, "FILE", "prediction heads trained for the model, for --spec heads");
  p.option("--spec-tokens", &tokens, "K", "tokens proposed per sequence and step", 1, kMaxSpecTokens);
  p.option("--spec-max-batch", &max_batch, "N", "no speculation in steps with more than N sequences decoding", 0,
           1 << 20);
  p.flag("--spec-fixed", &fixed,
         "always propose --spec-tokens tokens (default: choose 0..K each step from measured acceptance and step "
         "costs, so speculation runs only where it is expected to pay)");
}

std::string SpecFlags::proposer_name() const {
  const std::string name = spec.empty() && draft_model ? "draft" : spec;
  if (!name.empty() && name != "draft" && name != "ngram" && name != "heads") {
    throw UsageError("--spec '" + name + "': expected draft, ngram or heads");
  }
  if (draft_model && name != "draft") throw UsageError("--draft-model goes with --spec draft, not --spec " + name);
  if (heads && name != "heads") throw UsageError("--heads goes with --spec heads");
  return name;
}

std::shared_ptr<Proposer> SpecFlags::make_proposer(const Model& target, const std::optional<std::string>& target_path,
                                                   int64_t kv_tokens) const {
  const std::string name = proposer_name();
  if (name.empty()) return nullptr;
  if (name == "ngram") return std::make_shared<NgramProposer>();
  if (name == "heads") {
    return std::make_shared<DraftHeadsProposer>(open_companion(heads, target_path, DemoFile::Heads, "--heads"), target);
  }
  ModelFile file = open_companion(draft_model, target_path, DemoFile::Draft, "--draft-model");
  check_same_vocabulary(target.file(), file);
  // The draft shares the target's execution context: the same threads, taking turns.
  return std::make_shared<DraftModelProposer>(Model(std::move(file), target.shared_context()), kv_tokens);
}

void SpecFlags::apply(EngineConfig& config, std::shared_ptr<Proposer> proposer) const {
  config.proposer = std::move(proposer);
  config.spec_tokens = tokens;
  config.spec_max_batch = max_batch;
  config.spec_adaptive = !fixed;
}

}  // namespace peregrine::cli
