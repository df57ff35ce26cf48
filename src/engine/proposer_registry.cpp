#include "engine/proposer_registry.h"

#include <algorithm>

#include "engine/draft_heads_proposer.h"
#include "engine/draft_proposer.h"
#include "engine/ngram_proposer.h"

namespace peregrine {
namespace {

std::shared_ptr<Proposer> make_draft(ProposerInputs in) {
  check_same_vocabulary(in.target.file(), *in.file);
  // The draft shares the target's execution context: the same threads, taking turns.
  return std::make_shared<DraftModelProposer>(Model(std::move(*in.file), in.target.shared_context()), in.kv_tokens);
}

std::shared_ptr<Proposer> make_ngram(ProposerInputs) { return std::make_shared<NgramProposer>(); }

std::shared_ptr<Proposer> make_heads(ProposerInputs in) {
  return std::make_shared<DraftHeadsProposer>(std::move(*in.file), in.target);
}

constexpr ProposerEntry kProposers[] = {
    {"draft",
     {.file_flag = "--draft-model",
      .file_help = "draft model for --spec draft (same vocabulary as the model)",
      .file_selects = true,
      .hidden_state = false,
      .whole_model = false,
      .whole_model_why = ""},
     make_draft},
    {"ngram", {}, make_ngram},
    {"heads",
     {.file_flag = "--heads",
      .file_help = "prediction heads trained for the model, for --spec heads",
      .file_selects = false,
      .hidden_state = true,
      .whole_model = true,
      .whole_model_why = "its heads read the output matrix"},
     make_heads},
};

}  // namespace

std::span<const ProposerEntry> proposer_registry() { return kProposers; }

const ProposerEntry* find_proposer(std::string_view name) {
  const auto it = std::find_if(std::begin(kProposers), std::end(kProposers),
                               [&](const ProposerEntry& e) { return e.name == name; });
  return it == std::end(kProposers) ? nullptr : &*it;
}

std::string proposer_names() {
  std::string out;
  const auto n = std::size(kProposers);
  for (size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(kProposers[i].name);
  }
  return out;
}

}  // namespace peregrine
