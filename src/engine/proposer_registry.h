#pragma once
// Every speculative-decoding proposer the commands can name, in one table: its name, what it
// needs from the target and the layout, and how to build it. The flags (cli/spec_flags.cpp,
// cli/dist_flags.cpp) read only this table, so a new proposer is one class implementing
// Proposer (engine/proposer.h) and one entry in proposer_registry.cpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/proposer.h"
#include "format/model_file.h"
#include "model/model.h"

namespace peregrine {

// What a proposer needs besides the target model.
struct ProposerNeeds {
  // A file of its own (a draft model, trained heads): the flag that names it and the flag's help;
  // empty when it needs none. A build with the demo model embeds the demo's file of the
  // proposer's name (cli/embedded_model.h), so the demo needs no flag.
  std::string_view file_flag;
  std::string_view file_help;
  // Giving the file alone selects the proposer (--draft-model FILE means --spec draft).
  bool file_selects = false;
  // Reads the target's final hidden states (Proposer::on_commit's target_hidden): a pipeline's
  // rank 0 does not have them.
  bool hidden_state = false;
  // Reads parts of the target that only the whole model holds in one process (its output matrix);
  // why, for the refusal on a layout.
  bool whole_model = false;
  std::string_view whole_model_why;
};

// What a factory builds from.
struct ProposerInputs {
  const Model& target;            // outlives the proposer
  std::optional<ModelFile> file;  // the proposer's own file when ProposerNeeds::file_flag is set
  int64_t kv_tokens = 0;          // room for a cache of its own (a draft model's), in tokens
};

struct ProposerEntry {
  std::string_view name;  // what --spec takes
  ProposerNeeds needs;
  // Throws UsageError / FormatError naming the file for one that does not fit the target.
  std::shared_ptr<Proposer> (*make)(ProposerInputs inputs);
};

// The registered proposers, in the order help and errors list them.
std::span<const ProposerEntry> proposer_registry();
// The entry named `name`, or null.
const ProposerEntry* find_proposer(std::string_view name);
// "draft, ngram or heads": the names for a help line or an error.
std::string proposer_names();

}  // namespace peregrine
